"""``summary.json``: what one run did, for ``python -m transformer_nmt.report <sweep dir>``."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint

SUMMARY_FILE = "summary.json"


def run_summary(trainer: pl.Trainer, module, status: str, error: str | None = None) -> dict:
    """Status, model shape, schedule, size, steps, last logged metrics and the best checkpoint."""
    metrics = {}
    for key, value in trainer.callback_metrics.items():
        number = float(value)
        metrics[key] = number if math.isfinite(number) else None
    best = next((c for c in trainer.callbacks if isinstance(c, ModelCheckpoint)), None)
    best_score = (
        None if best is None or best.best_model_score is None else float(best.best_model_score)
    )
    return {
        "status": status,
        "error": error,
        "model": dict(module.hparams.model_config),
        "label_smoothing": module.hparams.label_smoothing,
        "warmup": module.schedule.warmup,
        "scheduler": module.schedule.name,
        "params": module.model.num_parameters(),
        "steps": trainer.global_step,
        "world_size": trainer.world_size,
        "metrics": metrics,
        "best": {
            "monitor": None if best is None else best.monitor,
            "score": best_score,
            "checkpoint": None if best is None else best.best_model_path or None,
        },
    }


def write_summary(output_dir: str | os.PathLike, summary: dict) -> Path:
    """Write ``summary`` to ``<output_dir>/summary.json`` atomically; returns the path."""
    path = Path(output_dir) / SUMMARY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{SUMMARY_FILE}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(summary, handle, indent=2)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
