"""Atomic files and directories, and the per-path lock that cache builders take turns on."""

import errno
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from tests.helpers.commands import script_environment
from transformer_nmt.atomic import (
    COMPLETE_MARKER,
    WriteError,
    build_directory_atomically,
    check_writable_directory,
    is_complete,
    lock_path,
    path_lock,
    write_directory_atomically,
    write_file_atomically,
    write_text_atomically,
)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_failed_file_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = write_text_atomically(tmp_path / "notes.txt", "old\n")

    def crash(handle):
        handle.write("half of the new")
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError, match="mid-write"):
        write_file_atomically(path, crash, binary=False)
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_a_written_file_gets_the_usual_permissions(tmp_path):
    path = write_file_atomically(tmp_path / "a" / "b.bin", lambda h: h.write(b"\0"), binary=True)
    assert path.read_bytes() == b"\0"
    assert path.stat().st_mode & 0o777 == 0o666 & ~_umask()


def test_a_file_in_the_way_of_a_directory_is_a_not_a_directory_error(tmp_path):
    (tmp_path / "taken").write_text("")
    with pytest.raises(NotADirectoryError):
        check_writable_directory(tmp_path / "taken")


def test_an_output_directory_is_replaced_only_when_asked(tmp_path):
    output = tmp_path / "export"
    write_directory_atomically(output, lambda d: (d / "one").write_text("1"))
    with pytest.raises(FileExistsError, match="already exists"):
        write_directory_atomically(output, lambda d: (d / "two").write_text("2"))
    write_directory_atomically(output, lambda d: (d / "two").write_text("2"), overwrite=True)
    assert [p.name for p in output.iterdir()] == ["two"]
    assert output.stat().st_mode & 0o777 == 0o777 & ~_umask()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def test_a_failed_output_directory_build_keeps_the_old_one(tmp_path):
    output = write_directory_atomically(tmp_path / "export", lambda d: (d / "one").write_text("1"))

    def crash(directory):
        (directory / "half").write_text("")
        raise RuntimeError("killed mid-build")

    with pytest.raises(RuntimeError, match="mid-build"):
        write_directory_atomically(output, crash, overwrite=True)
    assert [p.name for p in output.iterdir()] == ["one"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def test_an_entry_is_built_once_by_threads_that_want_it_together(tmp_path):
    entry, builds = tmp_path / "cache" / "entry", []

    def build(directory):
        builds.append(threading.get_ident())
        time.sleep(0.2)  # the other threads arrive while this one builds
        (directory / "data").write_text("built")

    threads = [
        threading.Thread(target=build_directory_atomically, args=(entry, build, {"n": 1}))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(builds) == 1
    assert is_complete(entry) and (entry / "data").read_text() == "built"
    assert (entry / COMPLETE_MARKER).read_text().strip().startswith("{")
    assert sorted(p.name for p in entry.parent.iterdir()) == [".entry.lock", "entry"]


def test_an_incomplete_entry_is_rebuilt(tmp_path):
    entry = tmp_path / "entry"
    entry.mkdir()
    (entry / "data").write_text("half")
    build_directory_atomically(entry, lambda d: (d / "data").write_text("whole"))
    assert is_complete(entry) and (entry / "data").read_text() == "whole"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".entry.lock", "entry"]


def test_the_lock_excludes_threads_and_names_its_holder_to_a_waiter(tmp_path, caplog):
    path, events = tmp_path / ".thing.lock", []
    held = threading.Event()

    def hold():
        with path_lock(path, "building thing"):
            events.append("first in")
            held.set()
            time.sleep(0.3)
            events.append("first out")

    first = threading.Thread(target=hold)
    first.start()
    held.wait()
    with (
        caplog.at_level(logging.INFO, logger="transformer_nmt.atomic"),
        path_lock(path, "building thing"),
    ):
        events.append("second in")
    first.join()
    assert events == ["first in", "first out", "second in"]
    holder = f"{os.uname().nodename} pid {os.getpid()}"
    assert f"waiting for {holder} to finish building thing" in caplog.text
    assert path.read_text() == f"{holder}\n"  # kept: removing it would race with a waiter


HOLDER = """
import sys, time
from pathlib import Path
from transformer_nmt.atomic import path_lock

with path_lock(Path(sys.argv[1]), "holding"):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _hold_in_a_process(path, seconds) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path), str(seconds)],
        env=script_environment(),
        stdout=subprocess.PIPE,
        encoding="utf-8",
    )
    assert process.stdout.readline().strip() == "held"
    return process


@pytest.mark.slow
def test_the_lock_excludes_another_process_until_it_ends_or_dies(tmp_path):
    path = lock_path(tmp_path / "entry")
    holder = _hold_in_a_process(path, seconds=0.5)
    start = time.monotonic()
    with path_lock(path, "waiting"):
        waited = time.monotonic() - start
    assert holder.wait(timeout=30) == 0
    assert waited > 0.2  # it waited for the other process to let go
    killed = _hold_in_a_process(path, seconds=600)
    killed.kill()
    killed.wait()
    start = time.monotonic()
    with path_lock(path, "after a killed holder"):  # the kernel dropped the dead holder's lock
        assert time.monotonic() - start < 5


def test_a_full_disk_is_one_write_error_naming_the_path_and_the_space_needed(tmp_path):
    path = write_text_atomically(tmp_path / "last.ckpt", "old\n")

    def disk_full(handle):
        handle.write("half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(WriteError) as error:
        write_file_atomically(path, disk_full, binary=False, size=12_500_000)
    message = str(error.value)
    assert message.startswith(f"cannot write {path}: No space left on device; ")
    assert "it needs about 12.5 MB, " in message and " MB are free there" in message
    assert error.value.errno == errno.ENOSPC
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_a_read_only_filesystem_is_one_write_error_for_a_directory_too(tmp_path, monkeypatch):
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(tmp_path))

    monkeypatch.setattr(tempfile, "mkdtemp", read_only)
    with pytest.raises(WriteError) as error:
        write_directory_atomically(tmp_path / "export", lambda d: None)
    assert str(error.value) == (
        f"cannot write {tmp_path / 'export'}: Read-only file system; what was there is left as "
        f"it was; choose a location where you can write"
    )
    monkeypatch.undo()
    with pytest.raises(ZeroDivisionError):  # a bug in the writer is no WriteError
        write_file_atomically(tmp_path / "x", lambda handle: 1 / 0, binary=True)


def test_every_file_of_a_built_directory_gets_the_usual_permissions(tmp_path):
    def build(directory):
        private = directory / "model.safetensors"
        private.write_bytes(b"weights")
        private.chmod(0o600)  # what safetensors leaves
        (directory / "sub").mkdir(mode=0o700)
        (directory / "sub" / "vocab.json").write_text("{}")

    output = write_directory_atomically(tmp_path / "export", build)
    modes = {p.name: p.stat().st_mode & 0o777 for p in output.rglob("*")}
    assert modes == {
        "model.safetensors": 0o666 & ~_umask(),
        "sub": 0o777 & ~_umask(),
        "vocab.json": 0o666 & ~_umask(),
    }
