"""Training throughput in target tokens per second, measured between logging steps."""

from __future__ import annotations

import time

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback


class TokenRate:
    """Tokens per second of training time between two readings; time spent while paused
    (validation) is not counted. The token counts come from the caller."""

    def __init__(self) -> None:
        self._tokens = 0
        self._seconds = 0.0
        self._since: float | None = None  # None: paused, or not started
        self._started = False

    def start(self, tokens: int) -> None:
        self._tokens, self._seconds, self._since = tokens, 0.0, time.perf_counter()
        self._started = True

    def pause(self) -> None:
        if self._since is not None:
            self._seconds += time.perf_counter() - self._since
            self._since = None

    def resume(self) -> None:
        if self._started and self._since is None:
            self._since = time.perf_counter()

    def read(self, tokens: int) -> float:
        """Tokens per second since the last reading (or the start); starts the next interval."""
        now = time.perf_counter()
        seconds = self._seconds + (now - self._since if self._since is not None else 0.0)
        rate = (tokens - self._tokens) / max(seconds, 1e-9)
        self._tokens, self._seconds, self._since = tokens, 0.0, now
        return rate


def logging_step(trainer: pl.Trainer, last_seen_step: int) -> bool:
    """Whether the batch that just ended took optimizer step ``trainer.global_step`` (it is not
    ``last_seen_step``) and that step is one of ``trainer.log_every_n_steps``'s."""
    step, every = trainer.global_step, trainer.log_every_n_steps
    return step != last_seen_step and every > 0 and step % every == 0


class TokenThroughput(Callback):
    """Logs ``train/tokens_per_sec`` every ``trainer.log_every_n_steps`` optimizer steps: target
    tokens (labels that are not pad, EOS included) of all ranks per second of training since
    the previous logging step. Validation time is not counted; data loading is.

    The token count is the module's ``tokens_trained``, which the training step already sums
    over ranks once per optimizer step: this callback adds no collective and no device sync.
    """

    def __init__(self) -> None:
        self.rate = TokenRate()
        self._last_step = -1

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.rate.start(pl_module.tokens_trained)
        self._last_step = trainer.global_step

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.rate.pause()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.rate.resume()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if logging_step(trainer, self._last_step):
            rate = self.rate.read(pl_module.tokens_trained)
            pl_module.log("train/tokens_per_sec", rate, prog_bar=True, batch_size=1)
        self._last_step = trainer.global_step
