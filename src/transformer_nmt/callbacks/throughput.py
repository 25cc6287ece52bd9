"""Training throughput in target tokens per second."""

from __future__ import annotations

import time

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback


class TokenThroughput(Callback):
    """Logs ``train/tokens_per_sec``: target tokens (labels that are not pad, EOS included) per
    second of training, summed over all ranks, over the last ``window`` batches.

    Time spent in validation is not counted; data loading is.
    """

    def __init__(self, window: int) -> None:
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
