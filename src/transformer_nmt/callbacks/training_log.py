"""Lines in the run's log (``train.log``) that a person can follow without a progress bar."""

from __future__ import annotations

import logging
import math
import time
from datetime import timedelta

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback, Timer

from transformer_nmt.callbacks.throughput import TokenRate, logging_step

log = logging.getLogger(__name__)


class TrainingLog(Callback):
    """Every ``trainer.log_every_n_steps`` optimizer steps one line, and one after every
    validation, from rank 0, into the Python log (Hydra writes it to ``train.log`` and the
    console), so SLURM and CI logs read well with ``trainer.enable_progress_bar=false``::

        step 1200/100000 (1.2%) | epoch 3 | loss 4.512 | lr 0.000699 | 24,312 tok/s |
            elapsed 0:41:02 | ETA 2 days, 9:14:41          (one line)
        validation @ step 5000 | loss 3.218 | ppl 13.05 | bleu 25.31

    tok/s counts the target tokens of all ranks since the previous line, validation time
    excluded; the ETA extrapolates this run's time per step (validation included) to
    ``max_steps`` (or the steps of ``max_epochs``), or is the time ``max_time`` leaves, whichever
    comes first.
    """

    def __init__(self) -> None:
        self.rate = TokenRate()
        self._last_step = -1
        self._started: float | None = None
        self._first_step = 0
        self._total_steps: int | None = None
        self._before_validation: dict = {}

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.rate.start(pl_module.tokens_trained)
        self._started = time.perf_counter()
        self._first_step = self._last_step = trainer.global_step
        # max_steps, or the optimizer steps of max_epochs if fewer; None if neither bounds it
        total = trainer.estimated_stepping_batches
        self._total_steps = int(total) if math.isfinite(total) else None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if logging_step(trainer, self._last_step):
            rate = self.rate.read(pl_module.tokens_trained)
            if trainer.is_global_zero:
                log.info(self._step_line(trainer, rate))
        self._last_step = trainer.global_step

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.rate.pause()
        self._before_validation = dict(trainer.callback_metrics)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.rate.resume()
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        metrics = trainer.callback_metrics
        # only what this validation logged (an earlier val/bleu stays in callback_metrics)
        fresh = {k: float(v) for k, v in metrics.items() if self._before_validation.get(k) is not v}
        parts = [f"validation @ step {trainer.global_step}"]
        for name, spec in (("loss", ".3f"), ("ppl", ".2f"), ("bleu", ".2f")):
            if f"val/{name}" in fresh:
                parts.append(f"{name} {fresh[f'val/{name}']:{spec}}")
        log.info(" | ".join(parts))

    def _step_line(self, trainer: pl.Trainer, rate: float) -> str:
        metrics = trainer.callback_metrics
        step = trainer.global_step
        total = self._total_steps
        parts = [f"step {step}/{total} ({step / total:.1%})" if total else f"step {step}"]
        parts.append(f"epoch {trainer.current_epoch}")
        if "train/loss" in metrics:
            parts.append(f"loss {float(metrics['train/loss']):.3f}")
        if "lr" in metrics:
            parts.append(f"lr {float(metrics['lr']):.3g}")
        parts.append(f"{rate:,.0f} tok/s")
        elapsed = time.perf_counter() - self._started
        parts.append(f"elapsed {_clock(elapsed)}")
        eta = self._eta(trainer, elapsed, total)
        if eta is not None:
            parts.append(f"ETA {_clock(eta)}")
        return " | ".join(parts)

    def _eta(self, trainer: pl.Trainer, elapsed: float, total: int | None) -> float | None:
        """Seconds left: this run's time per step times the steps left, or max_time's rest."""
        estimates = []
        done = trainer.global_step - self._first_step
        if total and done > 0:
            estimates.append(elapsed / done * max(total - trainer.global_step, 0))
        timer = next((c for c in trainer.callbacks if isinstance(c, Timer)), None)
        if timer is not None and timer.time_remaining("train") is not None:
            estimates.append(timer.time_remaining("train"))
        return min(estimates) if estimates else None


def _clock(seconds: float) -> str:
    """h:mm:ss (with days beyond 24 hours)."""
    return str(timedelta(seconds=round(seconds)))
