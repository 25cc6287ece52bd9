"""Hyper-parameter search: the number train() returns (optimized_metric), hparams_search=optuna,
and the W&B sweep file."""

import json

import pytest
import yaml
from omegaconf import OmegaConf

from tests.helpers import REPO_ROOT
from tests.helpers.commands import run_train
from tests.helpers.hydra_config import compose_config
from tests.helpers.tiny_runs import without
from tests.helpers.wandb_records import wandb_run
from transformer_nmt.decoding import SearchOptions
from transformer_nmt.evaluation.final_eval import FinalEvalConfig, final_evaluation
from transformer_nmt.tracking.objective import (
    METRICS,
    ObjectiveError,
    final_eval_for,
    objective_value,
)

SEARCHED = {"scheduler.warmup", "scheduler.factor", "model.dropout", "label_smoothing"}


def test_optuna_minimises_losses_and_maximises_bleu_over_its_search_space():
    def sweeper(*overrides):
        hydra = compose_config("hparams_search=optuna", *overrides, return_hydra_config=True).hydra
        return hydra.sweeper

    default = sweeper()
    assert default.direction == "minimize"  # optimized_metric=val/ppl
    assert default.sampler._target_ == "optuna.samplers.TPESampler"
    assert set(default.params) == SEARCHED
    assert sweeper("optimized_metric=test/chrf").direction == "maximize"


def test_the_final_evaluation_covers_what_the_metric_needs():
    only_val = FinalEvalConfig(splits=["val"], bleu=False, max_sentences=10)
    assert final_eval_for("test/bleu", only_val) == FinalEvalConfig(["val", "test"], True, 10)
    assert final_eval_for("val/ppl", FinalEvalConfig(splits=[])) == FinalEvalConfig(["val"])
    assert final_eval_for(None, only_val) is only_val


def test_the_metric_always_has_a_value_or_a_clear_error():
    assert objective_value("val/bleu", {"val/bleu": 12.5, "val/ppl": 3.0}) == 12.5
    assert objective_value(None, {}) is None
    with pytest.raises(ObjectiveError, match=r"optimized_metric=val/acc .*val/loss, val/nll"):
        objective_value("val/acc", {"val/loss": 1.0})
    with pytest.raises(ObjectiveError, match="val/ppl has no value: it is not finite"):
        objective_value("val/ppl", {"val/ppl": None})
    with pytest.raises(ObjectiveError, match="test/bleu has no value: the final evaluation"):
        objective_value("test/bleu", {"val/bleu": 1.0})


def test_a_final_evaluation_skipped_by_limit_batches_leaves_the_metric_unset_and_says_why():
    """trainer.limit_val_batches=0 makes Lightning's validate() return no results: the final
    evaluation then has no val/* values, and optimizing one names the cause and the fix."""

    class SkippingTrainer:  # what Lightning returns with limit_{val,test}_batches=0
        global_step, loggers, callback_metrics = 10, [], {}

        def validate(self, *args, **kwargs):
            return []

        test = validate

    module = type("Module", (), {"last_validated_step": None})()
    config = FinalEvalConfig(splits=["val", "test"], bleu=False)
    metrics = final_evaluation(SkippingTrainer(), module, None, config, SearchOptions())
    assert not any(value is not None for value in metrics.values())
    with pytest.raises(ObjectiveError, match=r"limit_val_batches=0.*optimized_metric=null"):
        objective_value("val/ppl", metrics)


def test_the_wandb_sweep_runs_train_py_with_its_values_as_hydra_overrides():
    sweep = yaml.safe_load((REPO_ROOT / "sweeps" / "wandb.yaml").read_text())
    assert (REPO_ROOT / sweep["program"]).is_file() and sweep["metric"]["name"] in METRICS
    command = sweep["command"]
    assert command[:3] == ["${env}", "${interpreter}", "${program}"]
    assert command[-1] == "${args_no_hyphens}"  # key=value, as Hydra reads overrides
    values = {
        key: spec["values"][1] if "values" in spec else spec["max"]
        for key, spec in sweep["parameters"].items()
    }
    args = [f"{key}={value}" for key, value in values.items()]
    cfg = compose_config("output_dir=/tmp/out", *command[3:-1], *args)
    for key, value in values.items():
        assert OmegaConf.select(cfg, key) == value


@pytest.mark.slow  # a search of two train.py runs
def test_an_optuna_search_of_two_trials_reports_the_best_final_metric(tiny_overrides, tmp_path):
    sweep_dir = tmp_path / "search"
    searched = without(tiny_overrides, "scheduler.warmup", "logger=") + ["logger=wandb"]
    run_train(
        ["-m", "hparams_search=optuna", "hydra.sweeper.n_trials=2", *searched]
        + ["trainer.max_steps=6", "trainer.val_check_interval=100", f"hydra.sweep.dir={sweep_dir}"],
        cwd=tmp_path,
    )
    summaries = [json.loads((sweep_dir / job / "summary.json").read_text()) for job in "01"]
    final = [summary["metrics"]["val/ppl"] for summary in summaries]
    assert all(s["status"] == "finished" and s["metric_steps"]["val/ppl"] == 6 for s in summaries)
    result = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    assert result["best_value"] == pytest.approx(min(final))  # val/ppl: lower is better
    assert set(result["best_params"]) == SEARCHED
    for job in "01":  # W&B names a trial by the searched values alone
        _, name, _ = wandb_run(sweep_dir / job)
        assert {part.split("=")[0] for part in name.split(",")} == SEARCHED
