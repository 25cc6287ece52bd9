"""``hydra/launcher=slurm`` against a real SLURM cluster (``.ci/start-slurm`` starts one on this
machine: one node of 2 CPUs): a job finishes; SLURM's pre-time-limit signal and ``scontrol
requeue`` each stop it with ``last.ckpt`` at the step it reached, requeue it and resume it to the
weights of an uninterrupted job; ``srun`` with 2 tasks trains DDP as 2 processes do outside SLURM.

Every job trains the tiny model on the tiny corpus for ``MAX_STEPS`` steps without validating
(the final evaluation still runs), writing ``last.ckpt`` only when it stops, so a job that
resumes can only have resumed from the checkpoint its stop wrote.
"""

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
import torch

from tests.helpers.commands import run_train, script_command, script_environment
from tests.helpers.run_if import run_if
from tests.helpers.slow import slow_fixture
from tests.helpers.tiny_runs import logged_metrics, without

pytestmark = [pytest.mark.slow, pytest.mark.slurm, run_if(slurm=True)]

MAX_STEPS = 100
SIGNAL_AT_STEP = 10  # the job is signalled once train.log shows this step


def default_partition() -> str:
    """The cluster's default partition (``sinfo`` marks it with ``*``), else its first."""
    names = subprocess.run(
        ["sinfo", "--noheader", "--format=%P"], capture_output=True, text=True, check=True
    ).stdout.split()
    return next((n.rstrip("*") for n in names if n.endswith("*")), names[0])


def slurm_sweep(tiny_overrides: list[str], sweep_dir: Path, devices: int = 1) -> list[str]:
    """``train.py`` arguments of a one-job sweep submitted to the cluster, as the README shows."""
    return [
        "-m",
        "hydra/launcher=slurm",
        f"hydra.launcher.partition={default_partition()}",
        "hydra.launcher.gpus_per_node=null",
        "hydra.launcher.cpus_per_task=1",
        "hydra.launcher.timeout_min=10",
        *training(tiny_overrides, devices),
        f"hydra.sweep.dir={sweep_dir}",
    ]


def training(tiny_overrides: list[str], devices: int = 1) -> list[str]:
    return [
        *without(tiny_overrides, "trainer.max_steps", "trainer.val_check_interval"),
        f"trainer.max_steps={MAX_STEPS}",
        f"trainer.val_check_interval={10 * MAX_STEPS}",  # no validation before the final one
        f"callbacks.last_checkpoint.every_n_train_steps={10 * MAX_STEPS}",  # only when stopped
        "callbacks.sample_translations=null",
        "final_eval.bleu=false",
        "trainer.accelerator=cpu",
        f"trainer.devices={devices}",
    ]


def submitit_job_ids(sweep_dir: Path) -> list[str]:
    """The SLURM job ids of a sweep: submitit keeps each job's files in .submitit/<job id>/."""
    return sorted(p.name for p in (sweep_dir / ".submitit").glob("*") if p.name.isdigit())


def slurm_job(job_id: str) -> dict[str, str]:
    """``scontrol show job``'s fields (the controller keeps an ended job for MinJobAge, 300 s)."""
    shown = subprocess.run(
        ["scontrol", "--oneliner", "show", "job", job_id],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(re.findall(r"(\w+)=(\S*)", shown))


def ended_slurm_job(job_id: str, timeout: float = 30) -> dict[str, str]:
    """``slurm_job(job_id)`` once SLURM has seen the job end (its result is written before)."""
    deadline = time.monotonic() + timeout
    while (job := slurm_job(job_id))["JobState"] in ("RUNNING", "COMPLETING"):
        assert time.monotonic() < deadline, f"job {job_id} still {job['JobState']}"
        time.sleep(0.2)
    return job


def submitit_logs(sweep_dir: Path) -> str:
    return "".join(p.read_text() for p in sorted((sweep_dir / ".submitit").glob("*/*_log.*")))


def start_sweep_until_step(args: list[str], cwd: Path, job_dir: Path, step: int):
    """Start ``train.py args`` (it submits and waits); return it and its SLURM job id once the
    job's train.log shows ``step``."""
    process = subprocess.Popen(
        script_command("train.py", *args),
        cwd=cwd,
        env=script_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    pattern = re.compile(rf"^.*step {step}/", re.MULTILINE)
    deadline = time.monotonic() + 120
    log = job_dir / "train.log"
    while process.poll() is None and time.monotonic() < deadline:
        if log.exists() and pattern.search(log.read_text()):
            return process, submitit_job_ids(job_dir.parent)[0]
        time.sleep(0.05)
    process.kill()
    output = process.communicate()[0].decode()
    logs = submitit_logs(job_dir.parent)
    pytest.fail(f"the job never reached step {step}:\n{output[-3000:]}\n{logs[-3000:]}")


def finish(process: subprocess.Popen, timeout: float = 180) -> str:
    try:
        output = process.communicate(timeout=timeout)[0].decode()
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output[-4000:]
    return output


def final_weights(job_dir: Path) -> dict:
    checkpoint = torch.load(job_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert checkpoint["global_step"] == MAX_STEPS
    return checkpoint["state_dict"]


def assert_same_weights(got: dict, expected: dict) -> None:
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        torch.testing.assert_close(got[key], value, rtol=1e-5, atol=1e-6, msg=key)


def assert_resumed_to_the_end(job_dir: Path, stopped: int) -> None:
    """The requeued job resumed from the last.ckpt of step ``stopped`` and finished the curve."""
    log = (job_dir / "train.log").read_text()
    last = job_dir / "checkpoints" / "last.ckpt"
    assert f"resuming from {last} (resume=auto)" in log
    assert f"rank 0 of 1 finished at step {MAX_STEPS}" in log
    summary = json.loads((job_dir / "summary.json").read_text())
    assert (summary["status"], summary["steps"]) == ("finished", MAX_STEPS)
    rows = logged_metrics(job_dir / "csv" / "metrics.csv")
    steps = [int(r["step"]) for r in rows if r["train/loss"]]
    assert steps == list(range(MAX_STEPS)), (
        f"stopped at {stopped}: {steps[stopped - 2 : stopped + 2]}"
    )


@slow_fixture(scope="module")
def uninterrupted(tiny_overrides, tmp_path_factory) -> Path:
    """A one-job sweep submitted through sbatch and left alone; returns its job's directory."""
    root = tmp_path_factory.mktemp("slurm")
    sweep_dir = root / "sweep"
    run_train(slurm_sweep(tiny_overrides, sweep_dir), cwd=root)
    return sweep_dir / "0"


def test_a_sweep_job_runs_on_the_cluster_and_finishes(uninterrupted):
    job_ids = submitit_job_ids(uninterrupted.parent)
    assert len(job_ids) == 1
    log = (uninterrupted / "train.log").read_text()
    assert f"rank 0 of 1 finished at step {MAX_STEPS}" in log
    summary = json.loads((uninterrupted / "summary.json").read_text())
    assert (summary["status"], summary["steps"]) == ("finished", MAX_STEPS)
    assert summary["metrics"]["test/ppl"] is not None
    assert final_weights(uninterrupted)  # last.ckpt of the last step
    assert f"JobEnvironment(job_id={job_ids[0]}," in submitit_logs(uninterrupted.parent)
    job = ended_slurm_job(job_ids[0])
    assert (job["JobState"], job["Partition"]) == ("COMPLETED", default_partition())


def test_the_pre_time_limit_signal_requeues_the_job_which_resumes_to_the_same_weights(
    uninterrupted, tiny_overrides, tmp_path
):
    sweep_dir = tmp_path / "sweep"
    job_dir = sweep_dir / "0"
    args = slurm_sweep(tiny_overrides, sweep_dir)
    process, job_id = start_sweep_until_step(args, tmp_path, job_dir, SIGNAL_AT_STEP)
    # What SLURM sends signal_delay_s before the time limit (sbatch --signal=USR2@<delay>).
    subprocess.run(["scancel", "--signal=USR2", job_id], check=True)
    finish(process)

    log = (job_dir / "train.log").read_text()
    assert "received SIGUSR2: training stops at the end of this batch" in log
    stopped = int(re.search(r"rank 0 of 1 requeued at step (\d+)", log).group(1))
    assert SIGNAL_AT_STEP <= stopped < MAX_STEPS
    assert f"Requeued job {job_id}" in submitit_logs(sweep_dir)
    assert slurm_job(job_id)["Restarts"] == "1"
    assert_resumed_to_the_end(job_dir, stopped)
    assert_same_weights(final_weights(job_dir), final_weights(uninterrupted))


def test_a_job_of_two_tasks_trains_ddp_as_two_processes_do_outside_slurm(tiny_overrides, tmp_path):
    sweep_dir = tmp_path / "sweep"
    run_train(slurm_sweep(tiny_overrides, sweep_dir, devices=2), cwd=tmp_path)
    outside = tmp_path / "outside"
    run_train([*training(tiny_overrides, devices=2), f"hydra.run.dir={outside}"], cwd=tmp_path)

    job_dir = sweep_dir / "0"
    (job_id,) = submitit_job_ids(sweep_dir)
    job = ended_slurm_job(job_id)
    assert (job["JobState"], job["NumTasks"]) == ("COMPLETED", "2")
    task_logs = submitit_logs(sweep_dir)  # srun started both ranks, each a task of the job
    assert f"JobEnvironment(job_id={job_id}, hostname=" in task_logs
    assert "global_rank=0(2))" in task_logs and "global_rank=1(2))" in task_logs
    log = (job_dir / "train.log").read_text()  # both tasks run the job in its directory
    for rank in (0, 1):
        assert f"rank {rank} of 2 finished at step {MAX_STEPS}" in log
    summary = json.loads((job_dir / "summary.json").read_text())
    assert (summary["status"], summary["world_size"]) == ("finished", 2)
    assert not list(job_dir.glob("train_ddp_process_*.log"))  # Lightning started no process
    assert_same_weights(final_weights(job_dir), final_weights(outside))
