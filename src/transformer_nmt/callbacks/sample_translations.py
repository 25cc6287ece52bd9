"""A few greedy translations of validation sentences after every validation."""

from __future__ import annotations

import logging

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

from transformer_nmt.decoding import SearchOptions, greedy_search

log = logging.getLogger(__name__)


class SampleTranslations(Callback):
    """After each validation, greedy-translates the first ``num_samples`` sentences of rank 0's
    first validation batch and logs (source, reference, hypothesis): a table in W&B, text in
    TensorBoard, and lines in the run log. Output lengths follow ``search`` (its
    ``max_len_a``, ``max_len_b``); the search is greedy whatever its beam size, to stay fast.
    """

    def __init__(self, num_samples: int, search: SearchOptions) -> None:
        self.num_samples = num_samples
        self.search = search
        self._batch: dict | None = None

    def on_validation_batch_end(
        self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0
    ) -> None:
        if batch_idx == 0 and dataloader_idx == 0 and trainer.is_global_zero:
            n = self.num_samples
            self._batch = {key: batch[key][:n] for key in ("src_ids", "labels")}

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        batch, self._batch = self._batch, None
        if batch is None or trainer.sanity_checking or self.num_samples < 1:
            return
        rows = self.translate(trainer, pl_module, batch)
        step = trainer.global_step
        for index, (source, reference, hypothesis) in enumerate(rows):
            log.info(
                "sample %d @ step %d\n  src: %s\n  ref: %s\n  hyp: %s",
                index,
                step,
                source,
                reference,
                hypothesis,
            )
        columns = ["source", "reference", "hypothesis"]
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                logger.log_text(key="val/samples", columns=columns, data=rows, step=step)
            elif isinstance(logger, TensorBoardLogger):
                table = "\n".join(f"| {s} | {r} | {h} |" for s, r, h in rows)
                text = "| source | reference | hypothesis |\n|---|---|---|\n" + table
                logger.experiment.add_text("val/samples", text, step)

    def translate(self, trainer, pl_module, batch: dict) -> list[list[str]]:
        """[source, reference, hypothesis] strings for the stored batch rows."""
        hparams = pl_module.hparams
        hypotheses = greedy_search(
            pl_module.model,
            batch["src_ids"],
            hparams.bos_id,
            hparams.eos_id,
            self.search,
        )
        decode = trainer.datamodule.decode  # reads up to EOS, drops special tokens
        rows = zip(batch["src_ids"], batch["labels"], hypotheses, strict=True)
        return [[decode(src), decode(ref), decode(hyp)] for src, ref, hyp in rows]
