"""Lightning's rich progress bar with readable numbers, refreshed on logging steps only, and only
on a terminal."""

from __future__ import annotations

import sys

import lightning.pytorch as pl
from lightning.pytorch.callbacks import RichProgressBar


class ProgressBar(RichProgressBar):
    """``RichProgressBar`` whose metrics read well: three significant digits for small values
    (``lr: 0.000699``, not Lightning's ``lr: 0.000``), whole numbers for ``tokens_per_sec``.

    During training it reads the logged metrics only after a logging step's optimizer step
    (``trainer.log_every_n_steps``), the only steps that log new values: reading them converts
    every metric tensor to a number, which on a GPU waits for the device.

    It draws only where stdout, which it writes to, is a terminal: redirected to a file or a
    pipe (``> out.txt``, ``| tee``, a SLURM job) it stays off, as tqdm's ``disable=None`` does,
    and the lines of ``TrainingLog`` tell the progress.
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._metrics: dict = {}
        self._metrics_step = -1

    @property
    def is_enabled(self) -> bool:
        return super().is_enabled and sys.stdout.isatty()

    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict:
        step, every = trainer.global_step, trainer.log_every_n_steps
        stale = not trainer.training or (
            step != self._metrics_step and (every <= 0 or step % every == 0 or not self._metrics)
        )
        if stale:
            metrics = super().get_metrics(trainer, pl_module)
            self._metrics = {name: readable(name, value) for name, value in metrics.items()}
            self._metrics_step = step
        return self._metrics


def readable(name: str, value) -> object:
    """A metric as the progress bar shows it (strings are shown as they are)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if "tokens_per_sec" in name:
        return f"{value:,.0f}"
    if isinstance(value, int):
        return value
    if value == 0 or abs(value) >= 0.1:
        return f"{value:.3f}"
    return f"{value:.3g}"
