"""The LightningModule: teacher-forced label-smoothed training of the Transformer, nothing more."""

from __future__ import annotations

import math
from typing import Any

import lightning.pytorch as pl
import torch
from torchmetrics import MeanMetric

from transformer_nmt.checkpoint import embed_tokenizer_files
from transformer_nmt.data import tokenizer_files
from transformer_nmt.model import Transformer, TransformerConfig
from transformer_nmt.training.loss import TokenLosses, check_finite_loss, label_smoothed_loss
from transformer_nmt.training.optimizer import AdamConfig, build_adam
from transformer_nmt.training.schedules import StepSchedule, build_scheduler


class TranslationModule(pl.LightningModule):
    """Wires :class:`Transformer` to the Lightning loop.

    Batches are the data module's dicts (``src_ids``, ``tgt_in_ids``, ``labels``). The init
    arguments are saved as hyper-parameters, so a checkpoint alone rebuilds the model
    (``model_config``) and names its tokenizer (``tokenizer_dir``, ``tokenizer_identity``) and
    special ids: a plain ``torch.load`` reader finds them in ``ckpt["hyper_parameters"]`` and the
    model's weights under ``model.`` in ``ckpt["state_dict"]``. ``compile=True`` compiles the
    forward only, so the weights keep their names.
    """

    def __init__(
        self,
        model_config: dict,
        tokenizer_dir: str,
        src_lang: str,
        tgt_lang: str,
        bos_id: int,
        eos_id: int,
        pad_id: int,
        label_smoothing: float = 0.1,
        optimizer: dict | None = None,
        scheduler: dict | None = None,
        compile: bool = False,
        run_config: dict | None = None,
        tokenizer_identity: str | None = None,
    ) -> None:
        super().__init__()
        if model_config.get("pad_id") != pad_id:
            raise ValueError(
                f"model_config pad_id {model_config.get('pad_id')} != pad_id {pad_id}; take "
                f"both from the same tokenizer (train() fills them from the data module)"
            )
        self.save_hyperparameters(logger=False)
        self.model = Transformer(TransformerConfig(**model_config))
        # Noam's d_model is the model's, whatever the scheduler config says
        self.schedule = StepSchedule(**{**(scheduler or {}), "d_model": self.model.config.d_model})
        # A compiled *function*, not a registered module: parameter names stay ``model.*``.
        self._forward = torch.compile(self.model.forward) if compile else self.model.forward
        self.eval_loss = MeanMetric()  # validation or test, whichever runs
        self.eval_nll = MeanMetric()
        self.last_validated_step: int | None = None  # global step of the last real validation
        self._tokenizer_files: dict[str, bytes] | None = None

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Embed the tokenizer's files, so the checkpoint works where its cache does not exist."""
        if self._tokenizer_files is None:
            self._tokenizer_files = tokenizer_files(self.hparams.tokenizer_dir) or {}
        embed_tokenizer_files(checkpoint, self._tokenizer_files)

    def _losses(self, batch: dict) -> TokenLosses:
        logits = self._forward(batch["src_ids"], batch["tgt_in_ids"])
        return label_smoothed_loss(
            logits, batch["labels"], self.hparams.pad_id, self.hparams.label_smoothing
        )

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        out = self._losses(batch)
        finite = bool(torch.isfinite(out.loss))
        any_failed = not self.trainer.strategy.reduce_boolean_decision(finite, all=True)
        check_finite_loss(out.loss, self.global_step, any_failed)
        self.log("train/loss", out.loss, prog_bar=True, batch_size=out.n_tokens)
        self.log("lr", self.lr_schedulers().get_last_lr()[0], prog_bar=True, batch_size=1)
        return out.loss

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._update_eval_metrics(batch)

    def on_validation_epoch_end(self) -> None:
        self._log_eval_metrics("val")
        if not self.trainer.sanity_checking:
            self.last_validated_step = self.global_step

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self._update_eval_metrics(batch)

    def on_test_epoch_end(self) -> None:
        self._log_eval_metrics("test")

    def _update_eval_metrics(self, batch: dict) -> None:
        out = self._losses(batch)
        self.eval_loss.update(out.loss, weight=out.n_tokens)
        self.eval_nll.update(out.nll, weight=out.n_tokens)

    def _log_eval_metrics(self, split: str) -> None:
        # token-weighted means over the whole split, all ranks included (torchmetrics syncs)
        loss, nll = self.eval_loss.compute(), self.eval_nll.compute()
        self.eval_loss.reset()
        self.eval_nll.reset()
        # already equal on every rank; sync_dist only silences Lightning's DDP warning
        self.log(f"{split}/loss", loss, prog_bar=split == "val", sync_dist=True)
        self.log(f"{split}/nll", nll, sync_dist=True)
        self.log(f"{split}/ppl", math.exp(min(nll.item(), 700.0)), sync_dist=True)

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer = build_adam(
            self.model.parameters(), AdamConfig(**(self.hparams.optimizer or {}))
        )
        scheduler = build_scheduler(optimizer, self.schedule)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1},
        }
