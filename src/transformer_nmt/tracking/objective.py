"""The number a hyper-parameter search optimises: ``optimized_metric``, from the final evaluation.

``train()`` returns it to Hydra's sweeper (Optuna's, or any other), so it must exist for every
finished run whatever the validation interval: it is the final evaluation's value of
``<split>/<name>`` (``val/loss``, ``val/ppl``, ``val/bleu``, ``test/chrf``, …), and the final
evaluation always covers what it asks for (that split; the decoding for BLEU and chrF).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from transformer_nmt.evaluation.final_eval import SPLITS, FinalEvalConfig

LOWER_IS_BETTER = ("loss", "nll", "ppl")
HIGHER_IS_BETTER = ("bleu", "chrf")
DECODED = HIGHER_IS_BETTER
METRICS = tuple(f"{s}/{n}" for s in SPLITS for n in LOWER_IS_BETTER + HIGHER_IS_BETTER)


class ObjectiveError(ValueError):
    """``optimized_metric`` names no metric, or the run could not produce it."""


def check_metric(metric: str) -> tuple[str, str]:
    """``("val", "bleu")`` from ``"val/bleu"``; an :class:`ObjectiveError` for anything else."""
    if metric not in METRICS:
        raise ObjectiveError(
            f"optimized_metric={metric} is not a metric of the final evaluation; choose one of "
            f"{', '.join(METRICS)}"
        )
    split, name = metric.split("/")
    return split, name


def direction(metric: str) -> str:
    """``minimize`` for losses and perplexity, ``maximize`` for BLEU and chrF."""
    return "maximize" if check_metric(metric)[1] in HIGHER_IS_BETTER else "minimize"


def final_eval_for(metric: str | None, config: FinalEvalConfig) -> FinalEvalConfig:
    """``config`` widened to produce ``metric``: its split, and decoding if it is BLEU or chrF."""
    if metric is None:
        return config
    split, name = check_metric(metric)
    splits = [s for s in SPLITS if s in config.splits or s == split]
    return replace(config, splits=splits, bleu=config.bleu or name in DECODED)


def objective_value(metric: str | None, metrics: Mapping[str, float | None]) -> float | None:
    """The final value of ``metric`` (None if no metric is optimised), or a clear error."""
    if metric is None:
        return None
    check_metric(metric)
    value = metrics.get(metric)
    if value is None or not math.isfinite(value):
        found = (
            "it is not finite"
            if metric in metrics
            else "the final evaluation did not compute it (trainer.limit_val_batches=0 or "
            "limit_test_batches=0 skips its split)"
        )
        raise ObjectiveError(
            f"optimized_metric={metric} has no value: {found}; set optimized_metric=null for a "
            f"run that optimises nothing"
        )
    return float(value)


def register_direction_resolver() -> None:
    """``${metric_direction:val/bleu}`` -> ``maximize`` in configs (idempotent)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("metric_direction"):
        OmegaConf.register_new_resolver("metric_direction", direction)
