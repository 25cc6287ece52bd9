"""Starting DDP ranks from a Hydra job — single run or multirun — and cleaning up after it.

Lightning's ``ddp`` strategy starts ranks 1..N-1 with ``_SubprocessScriptLauncher``, which in
2.6 (lightning/pytorch/strategies/launchers/subprocess_script.py, calling
``_hydra_subprocess_cmd`` of lightning/fabric/strategies/launchers/subprocess_script.py) re-runs
``sys.argv`` plus ``hydra.run.dir=<run dir> hydra.job.name=train_ddp_process_<r>
hydra.output_subdir=null``.
Under ``-m`` that argv still holds ``-m`` and the whole sweep, so every child starts the sweep
again in a fresh sweep dir (Lightning #11300, #16694; Hydra #2070). And after ``fit`` Lightning
leaves ``LOCAL_RANK``/``WORLD_SIZE``/``MASTER_*`` in ``os.environ`` and the process group alive,
so the next job of a multirun in the same process would start no children and wait forever.

:class:`HydraJobLauncher` gives each child the *job's* command line instead — the config flags,
the job's own overrides (``hydra.overrides.task``), run mode, and ``hydra.run.dir`` = the job's
output dir — and :func:`distributed_job` restores the environment and tears the process group
down after each job.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
import torch.distributed
from lightning.pytorch import Trainer

from transformer_nmt.private_api import (
    SubprocessScriptLauncher,
    plain_script_command,
    replace_launcher,
    submitit_task_script,
)

log = logging.getLogger(__name__)

# Set by Lightning's launcher / seed_everything / thread tuning in the launching process.
_JOB_ENV = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "NODE_RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "OMP_NUM_THREADS",
    "PL_GLOBAL_SEED",
    "PL_SEED_WORKERS",
)
# Command-line flags that choose the config; children need them, the rest (-m, --cfg…) not.
_CONFIG_FLAGS = ("--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd")
# Hydra overrides that change what a job does and so must reach the children too (the launcher:
# under submitit's, a job resumes by default and all ranks take part in requeueing).
_FORWARDED_HYDRA_KEYS = ("hydra.job.chdir", "hydra.verbose", "hydra/job_logging", "hydra/launcher")


class HydraJobLauncher(SubprocessScriptLauncher):
    """Starts the other local ranks of the current Hydra job as ``python train.py <job args>``."""

    def _call_children_scripts(self) -> None:
        # Lightning's method with the command swapped for job_command().
        self._check_can_spawn_children()
        self.procs = []
        os.environ["MASTER_ADDR"] = self.cluster_environment.main_address
        os.environ["MASTER_PORT"] = str(self.cluster_environment.main_port)
        os.environ["NODE_RANK"] = str(self.cluster_environment.node_rank())
        os.environ["LOCAL_RANK"] = str(self.cluster_environment.local_rank())
        os.environ["WORLD_SIZE"] = f"{self.num_processes * self.num_nodes}"
        for local_rank in range(1, self.num_processes):
            env = os.environ.copy()
            env["LOCAL_RANK"] = f"{local_rank}"
            if os.environ.get("PL_GLOBAL_SEED") is None:
                env.pop("PL_GLOBAL_SEED", None)
            command, cwd = job_command(local_rank)
            log.debug("starting local rank %d: %s", local_rank, command)
            self.procs.append(subprocess.Popen(command, env=env, cwd=cwd))


def job_command(local_rank: int) -> tuple[list[str], str | None]:
    """(argv, cwd) that re-runs the current Hydra job, not the sweep, as ``local_rank``."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return plain_script_command(), None
    hydra = HydraConfig.get()
    command = _script_command() + config_flags(sys.argv[1:])
    command += list(hydra.overrides.task)
    command += [o for o in hydra.overrides.hydra if o.split("=", 1)[0] in _FORWARDED_HYDRA_KEYS]
    command += [
        f"hydra.run.dir={quote_override_value(hydra.runtime.output_dir)}",
        f"hydra.job.name=train_ddp_process_{local_rank}",
        "hydra.output_subdir=null",
    ]
    return command, hydra.runtime.cwd


def _script_command() -> list[str]:
    import __main__

    if getattr(__main__, "__spec__", None) is None:
        return [sys.executable, os.path.abspath(sys.argv[0])]
    if __main__.__spec__.name == "submitit.core._submit":  # a job of hydra/launcher=local|slurm
        return [sys.executable, submitit_task_script()]
    return [sys.executable, "-m", __main__.__spec__.name]


def config_flags(argv: Sequence[str]) -> list[str]:
    """The ``--config-path/--config-name/--config-dir`` flags (either spelling) of ``argv``."""
    kept: list[str] = []
    args = iter(argv)
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in _CONFIG_FLAGS:
            kept.append(arg)
            if "=" not in arg:
                kept.append(next(args, ""))
    return kept


def quote_override_value(value: str) -> str:
    """``value`` as a double-quoted Hydra override string (paths may hold ``=``, ``,``, spaces)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def adopt_hydra_launcher(trainer: Trainer) -> None:
    """Replace Lightning's script launcher on ``trainer`` by :class:`HydraJobLauncher`."""
    strategy = trainer.strategy
    launcher = strategy.launcher
    if type(launcher) is SubprocessScriptLauncher:
        replace_launcher(
            strategy,
            HydraJobLauncher(
                launcher.cluster_environment, launcher.num_processes, launcher.num_nodes
            ),
        )


def wait_for_children(trainer: Trainer, timeout: float = 600.0) -> None:
    """Wait for the ranks this process started; raise if one failed."""
    launcher = trainer.strategy.launcher
    for local_rank, proc in enumerate(getattr(launcher, "procs", []), start=1):
        code = proc.wait(timeout=timeout)
        if code != 0:
            raise RuntimeError(
                f"DDP local rank {local_rank} exited with code {code}; its log is "
                f"train_ddp_process_{local_rank}.log in the run's output dir"
            )


@contextmanager
def distributed_job() -> Iterator[None]:
    """Run one training job, then destroy its process group and restore the DDP environment
    variables and torch thread count it changed, so that the next job of a multirun starts clean.
    """
    saved_env = {name: os.environ.get(name) for name in _JOB_ENV}
    saved_threads = torch.get_num_threads()
    try:
        yield
    finally:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        torch.set_num_threads(saved_threads)
