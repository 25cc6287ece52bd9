"""A run directory has one owner (``run.lock``), and a new run never overwrites another run's
checkpoints unless told to."""

import json
import os
import socket
import subprocess
import sys
from dataclasses import asdict, replace

import pytest

from tests.helpers.commands import run_script
from transformer_nmt.launch.run_directory import (
    LOCK_FILE,
    Owner,
    RunDirectoryBusy,
    _start_ticks,
    claim_for_new_run,
    owning,
    read_owner,
)


def write_lock(directory, owner: Owner) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / LOCK_FILE).write_text(json.dumps(asdict(owner)))


@pytest.fixture
def live_process():
    """Another live process on this host, as the owner of a lock."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait()


def owner_of(process) -> Owner:
    """``process`` as the owner of a lock, as it would have written it."""
    return replace(Owner.this_process(), pid=process.pid, started=_start_ticks(process.pid))


def test_the_lock_names_its_owner_while_held_and_goes_on_any_exit(tmp_path):
    with pytest.raises(KeyError), owning(tmp_path) as owner:
        held = read_owner(tmp_path / LOCK_FILE)
        assert held == owner and (held.host, held.pid) == (socket.gethostname(), os.getpid())
        raise KeyError("a crash")
    assert not (tmp_path / LOCK_FILE).exists()


def test_a_live_owner_on_this_host_keeps_the_directory(tmp_path, live_process):
    owner = owner_of(live_process)
    write_lock(tmp_path, owner)
    with pytest.raises(RunDirectoryBusy) as error, owning(tmp_path):
        pass
    message = str(error.value)
    assert f"run directory {tmp_path} is in use by another train.py" in message
    assert f"host {socket.gethostname()}, pid {live_process.pid}" in message
    assert read_owner(tmp_path / LOCK_FILE) == owner  # left alone


def test_a_dead_owner_or_a_reused_pid_is_taken_over(tmp_path, live_process):
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    write_lock(tmp_path, replace(owner_of(live_process), pid=finished.pid))  # it has ended
    with owning(tmp_path) as owner:
        assert read_owner(tmp_path / LOCK_FILE) == owner
    # a live pid that started at another time: a former process whose pid was reused
    write_lock(tmp_path, replace(owner_of(live_process), started=1))
    with owning(tmp_path) as owner:
        assert owner.pid == os.getpid()


def test_an_owner_on_another_host_is_named_with_the_file_to_delete(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    write_lock(tmp_path, replace(Owner.this_process(), host="node-7", pid=4242))
    with pytest.raises(RunDirectoryBusy, match="host node-7, pid 4242") as error, owning(tmp_path):
        pass
    assert f"if that process has ended, delete {tmp_path / LOCK_FILE}" in str(error.value)


def test_an_earlier_run_of_the_same_slurm_job_is_taken_over(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "1234")
    write_lock(tmp_path, replace(Owner.this_process(), host="node-7", pid=4242))
    with owning(tmp_path) as owner:  # the job was requeued onto this host
        assert owner.slurm_job == "1234"


def checkpoints_of_a_run(run_dir):
    checkpoints = run_dir / "checkpoints"
    checkpoints.mkdir(parents=True)
    for name in ("last.ckpt", "best.ckpt"):
        (checkpoints / name).write_bytes(b"weights")
    return checkpoints


def test_a_new_run_is_refused_where_another_left_checkpoints(tmp_path):
    checkpoints = checkpoints_of_a_run(tmp_path)
    with pytest.raises(RunDirectoryBusy) as error:
        claim_for_new_run(tmp_path, [checkpoints], None, overwrite=False)
    assert str(error.value) == (
        f"run directory {tmp_path} holds the checkpoints of another run (checkpoints/best.ckpt, "
        f"checkpoints/last.ckpt): continue that run with resume=auto, start this one in a new "
        f"directory (hydra.run.dir=...), or replace that run with overwrite_run=true"
    )
    assert (checkpoints / "last.ckpt").exists()
    # resuming from one of them is continuing that run
    claim_for_new_run(tmp_path, [checkpoints], checkpoints / "last.ckpt", overwrite=False)
    other = tmp_path.parent / "other.ckpt"
    with pytest.raises(RunDirectoryBusy, match="in a new directory"):
        claim_for_new_run(tmp_path, [checkpoints], other, overwrite=False)


def test_overwrite_run_removes_the_checkpoints_of_the_run_before(tmp_path):
    checkpoints = checkpoints_of_a_run(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    claim_for_new_run(tmp_path, [checkpoints], None, overwrite=True)
    assert list(checkpoints.iterdir()) == [] and (tmp_path / "notes.txt").exists()


@pytest.mark.slow  # two runs of train.py, each stopped before any data work
def test_train_py_refuses_a_directory_in_use_and_another_runs_checkpoints(tiny_overrides, tmp_path):
    run_dir = tmp_path / "run"
    write_lock(run_dir, Owner.this_process())  # this test process owns it, alive
    (run_dir / "train.log").write_text("the owner's log\n")
    (run_dir / "summary.json").write_text('{"status": "finished"}')
    busy = run_script("train.py", *tiny_overrides, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert busy.returncode == 1
    lines = [line for line in busy.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, busy.stderr
    assert lines[0].startswith(
        f"error: run directory {run_dir} is in use by another train.py (host "
        f"{socket.gethostname()}, pid {os.getpid()}, since "
    )
    assert read_owner(run_dir / LOCK_FILE).pid == os.getpid()  # still ours
    assert (run_dir / "train.log").read_text() == "the owner's log\n"  # not a line written

    (run_dir / LOCK_FILE).unlink()
    checkpoints_of_a_run(run_dir)
    taken = run_script("train.py", *tiny_overrides, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert taken.returncode == 1
    assert f"error: run directory {run_dir} holds the checkpoints of another run" in taken.stderr
    assert (run_dir / "checkpoints" / "last.ckpt").read_bytes() == b"weights"
    assert not (run_dir / LOCK_FILE).exists()  # released on the way out
    log = (run_dir / "train.log").read_text()  # the other run's: no error or traceback added
    assert log.startswith("the owner's log\n") and "error" not in log and "Traceback" not in log
    assert (run_dir / "summary.json").read_text() == '{"status": "finished"}'
