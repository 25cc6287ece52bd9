"""DDP on 2 CPU processes (gloo), alone and inside a 2-job Hydra multirun."""

import json

import pytest
import torch

from tests.helpers.commands import run_train
from tests.helpers.tiny_runs import TINY_MODEL, without
from transformer_nmt.launch.ddp import config_flags, quote_override_value


def test_config_flags_keep_only_what_chooses_the_config():
    argv = ["-m", "--config-name", "train", "-cp=conf", "model=prenorm,postnorm", "--cfg", "job"]
    assert config_flags(argv) == ["--config-name", "train", "-cp=conf"]


def test_override_values_are_quoted_for_hydra():
    assert quote_override_value("/runs/0_model=pre,x") == '"/runs/0_model=pre,x"'
    assert quote_override_value('a"b') == '"a\\"b"'


def rank_lines(directory) -> list[str]:
    return sorted(
        line.split(" - ", 1)[1]
        for log in directory.glob("*.log")
        for line in log.read_text().splitlines()
        if "finished at step" in line
    )


@pytest.mark.slow  # two processes train
def test_devices_2_on_cpu_trains_with_two_ranks_in_one_output_dir(tiny_overrides, tmp_path):
    # The base-size model preset, shrunk so that 2 ranks fit in CI.
    args = [*without(tiny_overrides, "model"), "model=prenorm", *TINY_MODEL, "trainer.max_steps=4"]
    run_train([*args, "trainer.accelerator=cpu", "trainer.devices=2"], cwd=tmp_path)
    run_dirs = [p for p in (tmp_path / "outputs").glob("*/*") if p.is_dir()]
    assert len(run_dirs) == 1
    run_dir = run_dirs[0]
    assert sorted(p.name for p in run_dir.glob("*.log")) == ["train.log", "train_ddp_process_1.log"]
    lines = rank_lines(run_dir)
    assert [line.split(";")[0] for line in lines] == [
        "rank 0 of 2 finished at step 4",
        "rank 1 of 2 finished at step 4",
    ]
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert checkpoint["global_step"] == 4
    assert checkpoint["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]["world_size"] == 2


@pytest.mark.slow  # two jobs of two processes train
def test_multirun_of_two_ddp_jobs_gives_two_runs_of_two_ranks(tiny_overrides, tmp_path):
    # The base-size model presets, shrunk so that 2 ranks x 2 jobs fit in CI.
    args = [*without(tiny_overrides, "model", "logger="), *TINY_MODEL, "trainer.max_steps=3"]
    args += ["logger=wandb"]
    run_train(
        ["-m", "model=prenorm,postnorm", *args, "trainer.accelerator=cpu", "trainer.devices=2"],
        cwd=tmp_path,
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["multirun"]  # no stray outputs/
    sweeps = [p for p in (tmp_path / "multirun").glob("*/*") if p.is_dir()]
    assert len(sweeps) == 1, sweeps
    sweep = sweeps[0]
    jobs = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert jobs == ["0", "1"]
    sweep_name = str(sweep.relative_to(tmp_path))  # the W&B group, as configured
    for job, norm in zip(jobs, ["pre", "post"], strict=True):
        job_dir = sweep / job
        lines = [line.split(";")[0] for line in rank_lines(job_dir)]
        assert lines == ["rank 0 of 2 finished at step 3", "rank 1 of 2 finished at step 3"]
        checkpoint = torch.load(job_dir / "checkpoints" / "last.ckpt", weights_only=False)
        assert checkpoint["hyper_parameters"]["model_config"]["norm"] == norm
        summary = json.loads((job_dir / "summary.json").read_text())
        assert (summary["status"], summary["world_size"]) == ("finished", 2)
        wandb_runs = list((job_dir / "wandb").glob("offline-run-*"))
        assert len(wandb_runs) == 1
        record = next(wandb_runs[0].glob("run-*.wandb")).read_bytes()
        assert sweep_name.encode() in record  # grouped by sweep
    total = sum(len(rank_lines(sweep / job)) for job in jobs)
    assert total == 4
