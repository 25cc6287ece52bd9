"""Training callbacks: throughput, per-step dropout seeds, sample translations, ``last.ckpt``."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback, Checkpoint
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

from transformer_nmt.decoding import greedy_search

log = logging.getLogger(__name__)


class TokenThroughput(Callback):
    """Logs ``train/tokens_per_sec``: target tokens (labels that are not pad, EOS included) per
    second of training, summed over all ranks, over the last ``window`` batches.

    Time spent in validation is not counted; data loading is.
    """

    def __init__(self, window: int = 50) -> None:
        self.window = window
        self._history: list[tuple[float, int]] = []
        self._clock: float | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._clock = time.perf_counter()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._clock = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        now = time.perf_counter()
        tokens = int((batch["labels"] != pl_module.hparams.pad_id).sum())
        self._history = [*self._history[-(self.window - 1) :], (now - self._clock, tokens)]
        self._clock = now
        seconds = sum(s for s, _ in self._history)
        rate = sum(t for _, t in self._history) / max(seconds, 1e-9)
        pl_module.log(
            "train/tokens_per_sec",
            float(rate),
            prog_bar=True,
            reduce_fx="sum",
            sync_dist=True,
            batch_size=1,
        )


class StepSeed(Callback):
    """Reseeds torch before every training batch from (seed, epoch, batch index, rank).

    Dropout masks then depend only on the position in training, so a run resumed from a
    checkpoint draws the same masks as an uninterrupted one and continues its loss curve exactly
    (fairseq reseeds per update the same way). Ranks get different masks.
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        key = (self.seed, trainer.current_epoch, batch_idx, trainer.global_rank)
        value = 0
        for part in key:
            value = (value * 1_000_003 + part) % (2**61 - 1)
        torch.manual_seed(value)


class SampleTranslations(Callback):
    """After each validation, greedy-translates the first ``num_samples`` sentences of rank 0's
    first validation batch and logs (source, reference, hypothesis): a table in W&B, text in
    TensorBoard, and lines in the run log.
    """

    def __init__(self, num_samples: int = 4, max_len_a: float = 1.0, max_len_b: int = 50) -> None:
        self.num_samples = num_samples
        self.max_len_a, self.max_len_b = max_len_a, max_len_b
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
            max_len_a=self.max_len_a,
            max_len_b=self.max_len_b,
        )
        decode = trainer.datamodule.decode  # reads up to EOS, drops special tokens
        rows = zip(batch["src_ids"], batch["labels"], hypotheses, strict=True)
        return [[decode(src), decode(ref), decode(hyp)] for src, ref, hyp in rows]


class LastCheckpoint(Checkpoint):
    """Writes ``<dirpath>/last.ckpt`` every ``every_n_train_steps`` optimizer steps and at the
    last step, for resuming with ``ckpt_path=``; the best model is ModelCheckpoint's job.

    It saves from ``on_train_batch_end``, also on the batch where training is about to stop
    (``max_steps`` reached, or ``should_stop`` set by ``max_time``/early stopping: as a
    ``Checkpoint`` it runs after those callbacks). A checkpoint written there resumes at the
    next batch of the same epoch; one written in ``on_train_end`` would resume at the start of
    the next epoch, so that is only the fallback.
    """

    def __init__(self, dirpath: str, every_n_train_steps: int = 1000) -> None:
        if every_n_train_steps < 1:
            raise ValueError(f"every_n_train_steps must be >= 1, got {every_n_train_steps}")
        self.path = Path(dirpath) / "last.ckpt"
        self.every_n_train_steps = every_n_train_steps
        self._saved_step = -1

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        last_step = 0 < trainer.max_steps <= step
        if step % self.every_n_train_steps == 0 or last_step or trainer.should_stop:
            self._save(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._save(trainer)

    def _save(self, trainer: pl.Trainer) -> None:
        if trainer.global_step != self._saved_step:
            # every rank calls, rank 0 writes (atomically, see checkpointing.py)
            trainer.save_checkpoint(self.path, weights_only=False)
            self._saved_step = trainer.global_step
