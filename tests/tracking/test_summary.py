"""The pieces of a run's summary: the job's overrides as values, the final evaluation's options."""

import math

import pytest
import torch

from transformer_nmt.evaluation import FinalEvalConfig
from transformer_nmt.tracking.overrides import job_overrides, override_values
from transformer_nmt.tracking.summary import finite_metrics


def test_override_values_are_typed_and_keyed_without_prefixes():
    values = override_values(
        ["model=prenorm", "model.n_heads=4", "scheduler.warmup=1e3", "+callbacks.bleu.x=true"]
        + ["model.norm=pre", "~callbacks.samples", "trainer.max_time='00:00:04:00'"]
    )
    assert values == {
        "model": "prenorm",
        "model.n_heads": 4,
        "scheduler.warmup": 1000.0,
        "callbacks.bleu.x": True,
        "model.norm": "pre",
        "callbacks.samples": None,
        "trainer.max_time": "00:00:04:00",
    }


def test_outside_hydra_a_job_has_no_overrides():
    assert job_overrides() == []


def test_unknown_final_eval_split_is_a_clear_error():
    with pytest.raises(ValueError, match=r"unknown split\(s\) \['dev'\]; use \['val', 'test'\]"):
        FinalEvalConfig(splits=["val", "dev"])
    with pytest.raises(ValueError, match="final_eval.max_sentences must be positive"):
        FinalEvalConfig(max_sentences=0)


def test_finite_metrics_keeps_a_prefix_and_nulls_non_finite_values():
    values = {"val/ppl": torch.tensor(3.5), "val/loss": math.inf, "test/ppl": 2.0}
    assert finite_metrics(values, prefix="val/") == {"val/ppl": 3.5, "val/loss": None}
