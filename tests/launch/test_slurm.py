"""``hydra/launcher=slurm`` against a real SLURM cluster (``.ci/start-slurm`` starts one on this
machine: one node of 2 CPUs): a job finishes; SLURM's pre-time-limit signal and ``scontrol
requeue`` each stop a job with ``last.ckpt`` at the step it reached, and the job, queued again,
resumes to the weights of the job left alone; ``srun`` with 2 tasks trains DDP as 2 processes do
outside SLURM.

Every job trains the tiny model on the tiny corpus for ``MAX_STEPS`` steps without validating
(the final evaluation still runs) and writes ``last.ckpt`` only when it stops, so a job that
resumes can only have resumed from the checkpoint its stop wrote. The three one-task sweeps are
submitted at once (a job takes one of the 2 CPUs: the third waits in the queue), and each is
signalled as its job reaches ``SIGNAL_AT_STEP``.
"""

import json
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from tests.helpers.commands import run_train, script_command, script_environment
from tests.helpers.run_if import run_if
from tests.helpers.slow import slow_fixture
from tests.helpers.tiny_runs import logged_metrics, without

pytestmark = [pytest.mark.slow, pytest.mark.slurm, run_if(slurm=True)]

MAX_STEPS = 100
SIGNAL_AT_STEP = 10  # a job is signalled once its train.log shows this step
SIGNALS = {
    # What SLURM sends signal_delay_s before the time limit (sbatch --signal=USR2@<delay>).
    "signalled": ["scancel", "--signal=USR2"],
    # Pre-emption: SLURM stops the job with SIGTERM (SIGKILL KillWait later), queues it again.
    "requeued": ["scontrol", "requeue"],
}


def default_partition() -> str:
    """The cluster's default partition (``sinfo`` marks it with ``*``), else its first."""
    names = subprocess.run(
        ["sinfo", "--noheader", "--format=%P"], capture_output=True, text=True, check=True
    ).stdout.split()
    return next((n.rstrip("*") for n in names if n.endswith("*")), names[0])


def training(tiny_overrides: list[str], devices: int = 1) -> list[str]:
    """The tiny run's overrides for ``MAX_STEPS`` steps on ``devices`` CPU processes."""
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


@dataclass
class Sweep:
    """A ``train.py -m`` process that submitted one job and waits for it."""

    directory: Path
    process: subprocess.Popen
    output: str = ""

    @property
    def job_dir(self) -> Path:
        return self.directory / "0"

    @property
    def job_id(self) -> str:
        """The SLURM job id: submitit keeps the job's files in .submitit/<job id>/."""
        (job_id,) = [p.name for p in (self.directory / ".submitit").glob("*") if p.name.isdigit()]
        return job_id

    def reached(self, step: int) -> bool:
        log = self.job_dir / "train.log"
        return log.exists() and f"step {step}/{MAX_STEPS} " in log.read_text()

    def job_logs(self) -> str:
        logs = sorted((self.directory / ".submitit").glob("*/*_log.*"))
        return "".join(p.read_text() for p in logs)

    def finish(self, timeout: float) -> None:
        """Wait for the sweep; past ``timeout``, kill it and cancel its job."""
        try:
            self.output = self.process.communicate(timeout=timeout)[0].decode()
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.output = self.process.communicate()[0].decode()
                job_ids = [p.name for p in (self.directory / ".submitit").glob("[0-9]*")]
                subprocess.run(["scancel", *job_ids], check=False)


def start_train(args: list[str], cwd: Path) -> subprocess.Popen:
    """``python train.py args`` started in ``cwd``, its output piped."""
    return subprocess.Popen(
        script_command("train.py", *args),
        cwd=cwd,
        env=script_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


@slow_fixture(scope="module")
def sweeps(tiny_overrides, tmp_path_factory) -> dict[str, Sweep]:
    """Three one-job sweeps submitted at once: ``uninterrupted`` is left alone, ``signalled`` gets
    SIGUSR2 and ``requeued`` an ``scontrol requeue`` once they reach ``SIGNAL_AT_STEP``."""
    root = tmp_path_factory.mktemp("slurm")
    sweeps = {}
    for name in ("uninterrupted", *SIGNALS):
        directory = root / name
        process = start_train(slurm_sweep(tiny_overrides, directory), root)
        sweeps[name] = Sweep(directory, process)
    waiting, deadline = dict(SIGNALS), time.monotonic() + 180
    while waiting and time.monotonic() < deadline:
        for name, command in list(waiting.items()):
            sweep = sweeps[name]
            if sweep.reached(SIGNAL_AT_STEP):
                subprocess.run([*command, sweep.job_id], check=True)
                del waiting[name]
            elif sweep.process.poll() is not None:
                del waiting[name]  # ended before it was signalled: its test says so
        time.sleep(0.05)
    for sweep in sweeps.values():
        sweep.finish(timeout=max(deadline - time.monotonic(), 0) + 60)
    return sweeps


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


def assert_succeeded(sweep: Sweep) -> None:
    assert sweep.process.returncode == 0, f"{sweep.output[-3000:]}\n{sweep.job_logs()[-5000:]}"


def final_weights(job_dir: Path) -> dict:
    checkpoint = torch.load(job_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert checkpoint["global_step"] == MAX_STEPS
    return checkpoint["state_dict"]


def assert_same_weights(got: dict, expected: dict) -> None:
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        torch.testing.assert_close(got[key], value, rtol=1e-5, atol=1e-6, msg=key)


def stopped_step(sweep: Sweep, how: str) -> int:
    """The step at which the signalled job stopped (``how``: requeued | interrupted)."""
    found = re.search(
        rf"rank 0 of 1 {how} at step (\d+)", (sweep.job_dir / "train.log").read_text()
    )
    assert found, f"the job was never {how}:\n{sweep.job_logs()[-5000:]}"
    stopped = int(found.group(1))
    assert SIGNAL_AT_STEP <= stopped < MAX_STEPS
    return stopped


def assert_resumed_to_the_end(sweep: Sweep, stopped: int, uninterrupted: Sweep) -> None:
    """The job, queued again, resumed from the last.ckpt of step ``stopped``, finished the loss
    curve and ended with the uninterrupted job's weights."""
    assert slurm_job(sweep.job_id)["Restarts"] == "1"
    log = (sweep.job_dir / "train.log").read_text()
    assert f"resuming from {sweep.job_dir / 'checkpoints' / 'last.ckpt'} (resume=auto)" in log
    assert f"rank 0 of 1 finished at step {MAX_STEPS}" in log
    summary = json.loads((sweep.job_dir / "summary.json").read_text())
    assert (summary["status"], summary["steps"]) == ("finished", MAX_STEPS)
    rows = logged_metrics(sweep.job_dir / "csv" / "metrics.csv")
    assert [int(r["step"]) for r in rows if r["train/loss"]] == list(range(MAX_STEPS))
    assert_same_weights(final_weights(sweep.job_dir), final_weights(uninterrupted.job_dir))


def test_a_sweep_job_runs_on_the_cluster_and_finishes(sweeps):
    sweep = sweeps["uninterrupted"]
    assert_succeeded(sweep)
    assert f"rank 0 of 1 finished at step {MAX_STEPS}" in (sweep.job_dir / "train.log").read_text()
    summary = json.loads((sweep.job_dir / "summary.json").read_text())
    assert (summary["status"], summary["steps"]) == ("finished", MAX_STEPS)
    assert summary["metrics"]["test/ppl"] is not None
    assert final_weights(sweep.job_dir)  # last.ckpt of the last step
    assert f"JobEnvironment(job_id={sweep.job_id}," in sweep.job_logs()
    job = ended_slurm_job(sweep.job_id)
    assert (job["JobState"], job["Partition"], job["Restarts"]) == (
        "COMPLETED",
        default_partition(),
        "0",
    )


def test_the_pre_time_limit_signal_requeues_the_job_which_resumes_to_the_same_weights(sweeps):
    sweep = sweeps["signalled"]
    assert_succeeded(sweep)
    submission = sweep.directory / ".submitit" / sweep.job_id / f"{sweep.job_id}_submission.sh"
    assert "#SBATCH --signal=USR2@120\n" in submission.read_text()  # signal_delay_s reached sbatch
    log = (sweep.job_dir / "train.log").read_text()
    assert "received SIGUSR2: training stops at the end of this optimizer step" in log
    stopped = stopped_step(sweep, "requeued")
    assert f"Requeued job {sweep.job_id}" in sweep.job_logs()  # by submitit's handler
    assert_resumed_to_the_end(sweep, stopped, sweeps["uninterrupted"])


def test_scontrol_requeue_of_a_running_job_saves_and_resumes_to_the_same_weights(sweeps):
    sweep = sweeps["requeued"]
    assert_succeeded(sweep)
    log = (sweep.job_dir / "train.log").read_text()
    assert "received SIGTERM: training stops at the end of this optimizer step" in log
    stopped = stopped_step(sweep, "interrupted")
    assert "task 0: Exited with exit code 143" in sweep.job_logs()  # 128 + SIGTERM, says srun
    assert "Requeued job" not in sweep.job_logs()  # SLURM requeued it, not submitit
    assert_resumed_to_the_end(sweep, stopped, sweeps["uninterrupted"])


def test_a_job_of_two_tasks_trains_ddp_as_two_processes_do_outside_slurm(tiny_overrides, tmp_path):
    sweep_dir, outside = tmp_path / "sweep", tmp_path / "outside"
    # The run outside SLURM goes alongside, so that no CPU idles while the other starts up.
    outside_args = [*training(tiny_overrides, devices=2), f"hydra.run.dir={outside}"]
    outside_run = start_train(outside_args, tmp_path)
    try:
        run_train(slurm_sweep(tiny_overrides, sweep_dir, devices=2), cwd=tmp_path)
        output = outside_run.communicate(timeout=240)[0].decode()
    finally:
        outside_run.kill()
    assert outside_run.returncode == 0, output[-4000:]

    sweep = Sweep(sweep_dir, process=None)
    job = ended_slurm_job(sweep.job_id)
    assert (job["JobState"], job["NumTasks"]) == ("COMPLETED", "2")
    task_logs = sweep.job_logs()  # srun started both ranks, each a task of the job
    assert f"JobEnvironment(job_id={sweep.job_id}, hostname=" in task_logs
    assert "global_rank=0(2))" in task_logs and "global_rank=1(2))" in task_logs
    log = (sweep.job_dir / "train.log").read_text()  # both tasks run the job in its directory
    for rank in (0, 1):
        assert f"rank {rank} of 2 finished at step {MAX_STEPS}" in log
    summary = json.loads((sweep.job_dir / "summary.json").read_text())
    assert (summary["status"], summary["world_size"]) == ("finished", 2)
    assert not list(sweep.job_dir.glob("train_ddp_process_*.log"))  # Lightning started none
    assert_same_weights(final_weights(sweep.job_dir), final_weights(outside))
