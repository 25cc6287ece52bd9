"""Run as ``python -m tests.helpers.ddp_token_mean OUT``: one optimizer step of the tiny module on
2 CPU ranks (gloo), 3 accumulated micro-batches each, of very different token counts; rank 0
saves the gradients the step applied to OUT. ``RANK_TOKENS`` says which batches each rank got."""

import sys

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader

from tests.helpers.token_batches import applied_gradients, tiny_module, token_batch

RANK_TOKENS = ((5, 44, 2), (30, 1, 17))  # target tokens of each rank's micro-batches
SEED = 0


def rank_batches(rank: int) -> list[dict]:
    return [token_batch(n, seed=10 * rank + i) for i, n in enumerate(RANK_TOKENS[rank])]


class PerRankBatches(pl.LightningDataModule):
    def train_dataloader(self) -> DataLoader:
        return DataLoader(rank_batches(self.trainer.global_rank), batch_size=None)


def main(out: str) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(SEED)  # the same initial weights on both ranks
    module = tiny_module()
    initial = {key: value.clone() for key, value in module.state_dict().items()}
    trainer = pl.Trainer(
        accelerator="cpu", devices=2, strategy="ddp", max_steps=1, accumulate_grad_batches=3,
        use_distributed_sampler=False, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
    )  # fmt: skip
    trainer.fit(module, datamodule=PerRankBatches())
    if trainer.is_global_zero:
        torch.save({"initial": initial, "applied": applied_gradients(module)}, out)


if __name__ == "__main__":
    main(sys.argv[1])
