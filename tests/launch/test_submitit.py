"""``hydra/launcher=local``: a sweep's jobs run as submitit subprocesses, as on SLURM."""

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.helpers.commands import run_train, start_train_until
from tests.helpers.tiny_runs import ablation_overrides, logged_metrics, without


@pytest.mark.slow  # a sweep of two submitit processes
def test_submitit_local_launcher_runs_each_job_in_its_own_process(tiny_overrides, tmp_path):
    sweep_dir = tmp_path / "sweep"
    run_train(
        ["-m", "hydra/launcher=local", "ablation=positional", "experiment=multi30k_base"]
        + ablation_overrides(tiny_overrides)
        + ["trainer.max_steps=4", "final_eval.bleu=false", f"hydra.sweep.dir={sweep_dir}"],
        cwd=tmp_path,
    )
    submitit_dir = sweep_dir / ".submitit"  # <job id>/ per job (%j/ holds the submission)
    submitit_jobs = sorted(p for p in submitit_dir.iterdir() if p.name.isdigit())
    assert len(submitit_jobs) == 2  # one submitit job (a process id, locally) per Hydra job
    assert all(int(job.name) != os.getpid() for job in submitit_jobs)
    for job in submitit_jobs:
        assert list(job.glob("*_result.pkl")), f"submitit job {job.name} left no result"
        log = "".join(p.read_text() for p in job.glob("*_log.*"))
        assert "rank 0 of 1 finished at step 4" in log
    for number, positional in (("0", "sinusoidal"), ("1", "learned")):
        summary = json.loads((sweep_dir / number / "summary.json").read_text())
        assert (summary["status"], summary["steps"]) == ("finished", 4)
        assert summary["model"]["positional"] == positional
        assert summary["metrics"]["test/ppl"] is not None


def descendants(pid: int) -> list[int]:
    """Every process started (directly or not) by ``pid``, from /proc."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    direct = [int(p) for p in children.read_text().split()] if children.exists() else []
    return direct + [grandchild for child in direct for grandchild in descendants(child)]


def submitit_task(pid: int) -> int | None:
    for child in descendants(pid):
        try:
            if b"submitit.core._submit" in Path(f"/proc/{child}/cmdline").read_bytes():
                return child
        except FileNotFoundError:
            continue
    return None


@pytest.mark.slow  # a submitit job, signalled, requeued and resumed
@pytest.mark.parametrize("devices", [1, 2])  # 2: a rank Lightning starts, not a submitit task
def test_a_signalled_job_is_requeued_and_continues_from_the_step_it_saved(
    devices, tiny_overrides, tmp_path
):
    sweep_dir, max_steps = tmp_path / "sweep", 200
    job_dir, last = sweep_dir / "0", sweep_dir / "0" / "checkpoints" / "last.ckpt"
    args = [
        "-m", "hydra/launcher=local", *without(tiny_overrides, "trainer.val_"),
        f"trainer.max_steps={max_steps}", "trainer.val_check_interval=1000",
        "callbacks.last_checkpoint.every_n_train_steps=10", f"hydra.sweep.dir={sweep_dir}",
        "trainer.accelerator=cpu", f"trainer.devices={devices}",
    ]  # fmt: skip
    process = start_train_until(args, tmp_path, last, stdout=subprocess.PIPE)
    try:
        task = submitit_task(process.pid)
        job_logs = "".join(p.read_text() for p in sweep_dir.glob(".submitit/*/*_log.err"))
        assert last.exists() and task is not None, f"the job never trained:\n{job_logs[-3000:]}"
        os.kill(task, signal.SIGUSR2)  # what SLURM sends before the time limit or pre-emption
        output, _ = process.communicate(timeout=240)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output.decode()[-3000:]

    log = (job_dir / "train.log").read_text()
    stopped = int(re.search(rf"rank 0 of {devices} requeued at step (\d+)", log).group(1))
    assert 10 <= stopped < max_steps
    for rank in range(1, devices):  # the other ranks stopped at the same step, and finished
        rank_log = (job_dir / f"train_ddp_process_{rank}.log").read_text()
        assert f"rank {rank} of {devices} requeued at step {stopped};" in rank_log
        assert f"rank {rank} of {devices} finished at step {max_steps};" in rank_log
    assert "received SIGUSR2: training stops at the end of this optimizer step" in log
    assert f"resuming from {last} (resume=auto)" in log
    summary = json.loads((job_dir / "summary.json").read_text())
    assert (summary["status"], summary["steps"]) == ("finished", max_steps)
    rows = logged_metrics(job_dir / "csv" / "metrics.csv")
    assert [int(r["step"]) for r in rows if r["train/loss"]] == list(range(max_steps))
    submitit_log = "".join(p.read_text() for p in (sweep_dir / ".submitit").glob("*/*_log.*"))
    assert "Requeued job" in submitit_log
