"""``summary.json``: what one run did, for ``python report.py <sweep dir>``.

Keys: ``status`` (finished | interrupted | requeued | failed), ``error`` and ``signal`` (the
signal that stopped an interrupted or requeued run, e.g. ``SIGTERM``); ``overrides``
(the job's command-line overrides, which define it within a sweep); ``model`` (every
TransformerConfig field), ``label_smoothing``, ``warmup``, ``scheduler``, ``params``; ``steps``,
``world_size``, ``wall_time_s`` (the whole job) and ``fit_time_s`` (``trainer.fit`` alone);
``metrics`` (the last value of every metric the loggers received, so the same as W&B's,
TensorBoard's and ``metrics.csv``'s last points; the final evaluation's ``val/*`` and ``test/*``:
loss, nll, ppl and, if decoded, bleu and chrf, come last; non-finite values are null) and
``metric_steps`` (the global step each of those values was logged at); ``best`` (the best
checkpoint's monitor, score and path).
"""

from __future__ import annotations

import json
import math
import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformer_nmt.atomic import write_text_atomically

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from transformer_nmt.tracking.loggers import LoggedMetrics

SUMMARY_FILE = "summary.json"


def run_summary(
    trainer: pl.Trainer | None,
    module,
    status: str,
    error: str | None = None,
    metrics: LoggedMetrics | None = None,
    overrides: list[str] | None = None,
    wall_time_s: float | None = None,
    fit_time_s: float | None = None,
    signum: int | None = None,
) -> dict:
    """The summary of a run; ``metrics`` is the run's :class:`LoggedMetrics`.

    A run that failed before its trainer or module existed (a config error) has no trainer or
    module: what they would tell is null.
    """
    from lightning.pytorch.callbacks import ModelCheckpoint

    values, steps = (metrics.values, metrics.steps) if metrics is not None else ({}, {})
    callbacks = [] if trainer is None else trainer.callbacks
    best = next((c for c in callbacks if isinstance(c, ModelCheckpoint)), None)
    best_score = (
        None if best is None or best.best_model_score is None else float(best.best_model_score)
    )
    return {
        "status": status,
        "error": error,
        "signal": None if signum is None else signal.Signals(signum).name,
        "overrides": list(overrides or []),
        "model": {} if module is None else dict(module.hparams.model_config),
        "label_smoothing": None if module is None else module.hparams.label_smoothing,
        "warmup": None if module is None else module.schedule.warmup,
        "scheduler": None if module is None else module.schedule.name,
        "params": None if module is None else module.model.num_parameters(),
        "steps": None if trainer is None else trainer.global_step,
        "world_size": None if trainer is None else trainer.world_size,
        "wall_time_s": _seconds(wall_time_s),
        "fit_time_s": _seconds(fit_time_s),
        "metrics": finite_metrics(values),
        "metric_steps": dict(steps),
        "best": {
            "monitor": None if best is None else best.monitor,
            "score": best_score,
            "checkpoint": None if best is None else best.best_model_path or None,
        },
    }


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def write_summary(output_dir: str | os.PathLike, summary: dict) -> Path:
    """Write ``summary`` to ``<output_dir>/summary.json`` atomically; returns the path."""
    return write_text_atomically(Path(output_dir) / SUMMARY_FILE, json.dumps(summary, indent=2))


def finite_metrics(values: Mapping[str, Any], prefix: str = "") -> dict[str, float | None]:
    """Metric tensors/numbers as floats (non-finite -> None), keeping keys starting with prefix."""
    metrics = {}
    for key, value in values.items():
        if key.startswith(prefix):
            number = float(value)
            metrics[key] = number if math.isfinite(number) else None
    return metrics
