"""A real (tiny) ablation multirun: summaries, W&B grouping and config, and the report."""

import json

import pytest

from tests.helpers.commands import run_script
from tests.helpers.wandb_records import wandb_run
from transformer_nmt.tracking.report import ablation_table, load_sweep

pytestmark = pytest.mark.slow  # every test reads the sweep that train.py runs

EVAL_METRICS = {f"{split}/{name}" for split in ("val", "test") for name in ("loss", "ppl", "bleu")}


def test_each_job_writes_a_summary_with_final_val_and_test_scores(tiny_sweep):
    for job, norm in (("0", "post"), ("1", "pre")):
        summary = json.loads((tiny_sweep / job / "summary.json").read_text())
        assert summary["status"] == "finished" and summary["steps"] == 8
        assert summary["model"]["norm"] == norm and summary["params"] > 0
        assert f"model.norm={norm}" in summary["overrides"]
        assert "ablation=norm_warmup" in summary["overrides"]
        assert summary["wall_time_s"] >= summary["fit_time_s"] > 0
        metrics = summary["metrics"]
        assert set(metrics) >= EVAL_METRICS
        assert all(metrics[key] is not None for key in EVAL_METRICS)
        assert metrics["test/ppl"] == pytest.approx(2.718281828 ** metrics["test/nll"], rel=1e-4)


def test_the_final_validation_is_not_repeated_when_the_last_one_saw_the_last_step(tiny_sweep):
    log = (tiny_sweep / "0" / "train.log").read_text()
    assert log.count("decoded val (") == 1  # BLEU decoded once, at the end
    assert "final evaluation at step 8:" in log


def test_wandb_runs_share_the_sweep_group_and_carry_their_overrides(tiny_sweep):
    groups = set()
    for job, norm in (("0", "post"), ("1", "pre")):
        group, name, config = wandb_run(tiny_sweep / job)
        groups.add(group)
        assert name == f"model.norm={norm}"  # the swept key alone: warmup=20 is every job's
        assert config["overrides"]["model.norm"] == norm
        assert config["overrides"]["scheduler.warmup"] == 20  # a number, for parallel coordinates
        assert config["model"]["norm"] == norm  # and the composed config
    assert groups == {str(tiny_sweep)}


def test_report_turns_the_sweep_into_a_two_row_table_and_a_plot(tiny_sweep, tmp_path):
    result = run_script("report.py", str(tiny_sweep), "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    table = (tmp_path / "report.md").read_text()
    assert table == ablation_table(load_sweep(tiny_sweep)) and table in result.stdout
    rows, below = table.splitlines()[2:4], table.splitlines()[4:]
    assert below == ["", "BLEU (dev) decoded all dev sentences in each job."]
    assert rows[0].startswith("| model.norm=post |") and rows[1].startswith("| model.norm=pre |")
    assert all("| finished | ![" in row and "| — |" not in row for row in rows)  # + attention
    assert (tmp_path / "report.png").read_bytes().startswith(b"\x89PNG")
