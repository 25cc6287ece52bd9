"""A real (tiny) ablation multirun: summaries, W&B grouping and config, and the report."""

import json
import struct

import pytest

from tests.helpers.commands import run_script
from transformer_nmt.tracking.report import load_sweep, markdown_table

pytestmark = pytest.mark.slow  # every test reads the sweep that train.py runs

EVAL_METRICS = {f"{split}/{name}" for split in ("val", "test") for name in ("loss", "ppl", "bleu")}


def wandb_records(path):
    """The protobuf records of an offline ``run-*.wandb`` file (LevelDB log format)."""
    from wandb.proto import wandb_internal_pb2

    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    position, pending = 7, b""
    while position + 7 <= len(data):
        if block - position % block < 7:  # a block's tail too short for a header is padding
            position += block - position % block
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        pending += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def wandb_run(job_dir):
    """(group, name, config) of the job's offline W&B run."""
    (log,) = job_dir.glob("wandb/offline-run-*/run-*.wandb")
    group, name, config = None, None, {}
    for record in wandb_records(log):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            group, name = record.run.run_group, record.run.display_name
        if kind in ("run", "config"):
            items = record.run.config.update if kind == "run" else record.config.update
            config.update({item.key: json.loads(item.value_json) for item in items})
    return group, name, config


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
        assert f"model.norm={norm}" in name and "experiment=" not in name  # its own axes
        assert config["overrides"]["model.norm"] == norm
        assert config["overrides"]["scheduler.warmup"] == 20  # a number, for parallel coordinates
        assert config["model"]["norm"] == norm  # and the composed config
    assert groups == {str(tiny_sweep)}


def test_report_turns_the_sweep_into_a_two_row_table_and_a_plot(tiny_sweep, tmp_path):
    result = run_script("report.py", str(tiny_sweep), "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    table = (tmp_path / "report.md").read_text()
    assert table == markdown_table(load_sweep(tiny_sweep)) and table in result.stdout
    rows = table.splitlines()[2:]
    assert len(rows) == 2
    assert rows[0].startswith("| model.norm=post |") and rows[1].startswith("| model.norm=pre |")
    assert all(row.rstrip().endswith("| finished |") and "| — |" not in row for row in rows)
    assert (tmp_path / "report.png").read_bytes().startswith(b"\x89PNG")
