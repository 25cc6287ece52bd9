"""``last.ckpt``: the checkpoint a stopped run resumes from."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Checkpoint


class LastCheckpoint(Checkpoint):
    """Writes ``<dirpath>/last.ckpt`` every ``every_n_train_steps`` optimizer steps (after the
    last batch of the step, whatever the gradient accumulation) and at the last step, for
    resuming with ``ckpt_path=``; the best model is ModelCheckpoint's job.

    It saves from ``on_train_batch_end``, also on the batch where training is about to stop
    (``max_steps`` reached, or ``should_stop`` set by ``max_time``/early stopping: as a
    ``Checkpoint`` it runs after those callbacks). A checkpoint written there resumes at the
    next batch of the same epoch; one written in ``on_train_end`` would resume at the start of
    the next epoch, so that is only the fallback.
    """

    def __init__(self, dirpath: str, every_n_train_steps: int) -> None:
        if every_n_train_steps < 1:
            raise ValueError(f"every_n_train_steps must be >= 1, got {every_n_train_steps}")
        self.path = Path(dirpath) / "last.ckpt"
        self.every_n_train_steps = every_n_train_steps
        self._saved_step = -1
        self._seen_step: int | None = None  # global step at the end of the previous batch

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._seen_step = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        # With gradient accumulation only a step's last batch steps the optimizer.
        stepped, self._seen_step = step != self._seen_step, step
        last_step = 0 < trainer.max_steps <= step
        if (stepped and step % self.every_n_train_steps == 0) or last_step or trainer.should_stop:
            self._save(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._save(trainer)

    def _save(self, trainer: pl.Trainer) -> None:
        if trainer.global_step != self._saved_step:
            # every rank calls, rank 0 writes (atomically: checkpoint.AtomicCheckpointIO)
            trainer.save_checkpoint(self.path, weights_only=False)
            self._saved_step = trainer.global_step
