"""A run directory has one owner: the ``train.py`` process that holds its ``run.lock``.

The lock is a file created with ``O_CREAT | O_EXCL`` (atomic on local filesystems and on NFS v3
and later, unlike ``flock``, which NFS mounted ``nolock`` or ``local_lock=flock`` keeps
host-local) holding the owner's host, pid, process start time and SLURM job. It is held for the
run's lifetime and removed on every exit Python sees (an error, a signal, ``sys.exit``). A
process killed outright (SIGKILL, a node lost) leaves it behind; the next run takes it over when
the owner is provably gone: the same host and no process with that pid and start time (a
restarted container reuses pids), or the same SLURM job (a requeued job, which SLURM never runs
twice at once). An owner on another host outside SLURM cannot be checked from here: the error
names it and the file to delete once it is gone. Two processes taking over the same stale lock
in the same instant could both succeed; a lock that a live process holds is never taken.

Only global rank 0 owns the directory; the other ranks of a DDP job write into it under rank 0's
lock.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)

LOCK_FILE = "run.lock"


class RunDirectoryBusy(ValueError):
    """Another live process owns the run directory; the message names it."""


@dataclass(frozen=True)
class Owner:
    """Who holds a run directory's lock."""

    host: str
    pid: int
    started: int | None  # the process's start time in clock ticks after boot (Linux), if known
    slurm_job: str | None  # SLURM_JOB_ID, or <array job>_<task>, inside a SLURM job
    since: float  # when the lock was taken (seconds since the epoch)

    @classmethod
    def this_process(cls) -> Owner:
        return cls(socket.gethostname(), os.getpid(), _start_ticks(os.getpid()), _slurm_job(),
                   time.time())  # fmt: skip

    def is_gone(self) -> bool:
        """Whether the owner has provably ended (see the module's docstring)."""
        if self.slurm_job is not None and self.slurm_job == _slurm_job():
            return True  # an earlier run of this very SLURM job: requeued, so ended
        if self.host != socket.gethostname():
            return False  # cannot look at another host's processes
        if self.pid == os.getpid():
            return True  # this process holds no lock yet, so the owner was a former process
        started = _start_ticks(self.pid)
        return started is None or (self.started is not None and started != self.started)

    def describe(self) -> str:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        job = f", SLURM job {self.slurm_job}" if self.slurm_job else ""
        return f"host {self.host}, pid {self.pid}{job}, since {since}"


def _start_ticks(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks after boot), None if there is no such
    process; 0 where ``/proc`` is missing but the process exists."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return 0 if _alive(pid) else None
    return int(stat.rsplit(")", 1)[1].split()[19])  # field 22; the name may hold spaces


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _slurm_job() -> str | None:
    array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array_job is not None:
        return f"{array_job}_{os.environ.get('SLURM_ARRAY_TASK_ID', '')}"
    return os.environ.get("SLURM_JOB_ID")


def read_owner(lock: Path) -> Owner | None:
    """The owner recorded in ``lock``; None if the file is gone, empty or unreadable."""
    try:
        return Owner(**json.loads(lock.read_text()))
    except (OSError, ValueError, TypeError):
        return None


@contextlib.contextmanager
def owning(directory: Path | str) -> Iterator[Owner]:
    """Hold ``directory``'s lock for the block; raises :class:`RunDirectoryBusy` at once if a
    live process holds it."""
    lock = Path(directory) / LOCK_FILE
    owner = _acquire(lock)
    try:
        yield owner
    finally:
        if read_owner(lock) == owner:
            lock.unlink(missing_ok=True)


def _acquire(lock: Path) -> Owner:
    lock.parent.mkdir(parents=True, exist_ok=True)
    owner = Owner.this_process()
    for _ in range(3):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            _take_over_if_gone(lock)
            continue
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps(asdict(owner)) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        return owner
    raise RunDirectoryBusy(f"could not take the lock {lock}: other processes keep taking it")


def _take_over_if_gone(lock: Path) -> None:
    """Remove ``lock`` if its owner has ended; else raise :class:`RunDirectoryBusy`."""
    owner = read_owner(lock)
    if owner is None:
        try:  # being written right now, or left empty by a crash: wait for the writer
            if time.time() - lock.stat().st_mtime < 10:
                time.sleep(0.5)
                owner = read_owner(lock)
        except FileNotFoundError:
            return
    if owner is None or owner.is_gone():
        log.warning(
            "taking over %s from a run that ended without removing it (%s)",
            lock,
            owner.describe() if owner else "no owner recorded",
        )
        lock.unlink(missing_ok=True)
        return
    directory = lock.parent
    unverifiable = "" if owner.host == socket.gethostname() else (
        f"; if that process has ended, delete {lock}"
    )  # fmt: skip
    raise RunDirectoryBusy(
        f"run directory {directory} is in use by another train.py ({owner.describe()}): let "
        f"it finish or stop it, or choose another run directory (hydra.run.dir=...){unverifiable}"
    )


def claim_for_new_run(
    directory: Path | str,
    checkpoint_dirs: list[Path],
    resumes_from: Path | None,
    overwrite: bool,
    run_dir_option: str = "hydra.run.dir",
) -> None:
    """Refuse to start a new run where another run left checkpoints (it would overwrite them),
    unless this run resumes from one of them or ``overwrite`` (``overwrite_run=true``), which
    removes them first. ``resumes_from`` is the checkpoint this run resumes from, if any."""
    found = sorted({path for d in checkpoint_dirs if d.is_dir() for path in d.rglob("*.ckpt")})
    if not found:
        return
    if resumes_from is not None and any(resumes_from.is_relative_to(d) for d in checkpoint_dirs):
        return
    directory = Path(directory)
    shown = [str(path.relative_to(directory)) if path.is_relative_to(directory) else str(path)
             for path in found[:3]]  # fmt: skip
    names = ", ".join(shown) + (", ..." if len(found) > 3 else "")
    if overwrite:
        log.warning("overwrite_run=true: removing the checkpoints of the run before: %s", names)
        for path in found:
            path.unlink(missing_ok=True)
        return
    last = [path for path in found if path.name == "last.ckpt"]
    continue_it = "continue that run with resume=auto, " if last and resumes_from is None else ""
    raise RunDirectoryBusy(
        f"run directory {directory} holds the checkpoints of another run ({names}): "
        f"{continue_it}start this one in a new directory ({run_dir_option}=...), or replace "
        f"that run with overwrite_run=true"
    )
