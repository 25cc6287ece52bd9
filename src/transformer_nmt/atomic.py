"""Writing files and directories atomically: a reader sees the old version or the complete new
one, never a partial write, whatever kills the writer.

A file is written into a temporary file in the target's own directory (so the final rename never
crosses a filesystem), flushed and fsynced, then ``os.replace``-d over the target; the directory
is fsynced so the rename itself survives a crash. A directory (a cache entry) is built under a
temporary name beside its final path, marked ``COMPLETE`` and then renamed into place; readers
trust only entries that carry the marker. Builders of one entry take turns under a POSIX lock
(``fcntl.lockf``, which NFS supports), so processes and hosts sharing a cache build it once. An
output directory (an exported model) is built the same way, without the marker, and replaces an
older one only when asked to.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import shutil
import socket
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

COMPLETE_MARKER = "COMPLETE"
_BUILD_PREFIX = ".tmp-"
# POSIX locks belong to a process, so threads of one process take turns on a lock of their own
_THREAD_LOCKS: dict[str, threading.Lock] = {}
_THREAD_LOCKS_GUARD = threading.Lock()


def write_file_atomically(path: Path | str, write: Callable[[IO], None], binary: bool) -> Path:
    """Call ``write(handle)`` on a temporary file beside ``path``, then rename it over ``path``.

    If ``write`` raises, ``path`` is untouched and the temporary file is removed. The new file gets
    the usual permissions (0666 less the umask), not ``mkstemp``'s 0600. Returns ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as tmp:
            write(tmp)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.chmod(tmp_name, 0o666 & ~_umask())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)
    return path


def write_text_atomically(path: Path | str, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns the path."""
    return write_file_atomically(path, lambda handle: handle.write(text), binary=False)


def check_writable_directory(directory: Path | str) -> None:
    """Create ``directory`` if missing and check that a file can be written there; raises the
    ``OSError`` a writer would meet (permission denied, read-only, a file in the way, ...)."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except FileExistsError as error:  # a file where the directory should be
        code = errno.ENOTDIR
        raise NotADirectoryError(code, os.strerror(code), str(directory)) from error
    fd, probe = tempfile.mkstemp(prefix=".write-check-", suffix=".tmp", dir=directory)
    os.close(fd)
    os.unlink(probe)


def remove_stale_temporaries(path: Path | str) -> None:
    """Delete the temporary files of ``path`` that a writer killed mid-write left behind."""
    path = Path(path)
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        stale.unlink(missing_ok=True)


def is_complete(entry: Path) -> bool:
    """Whether ``entry`` is a fully written directory (see :func:`build_directory_atomically`)."""
    return (entry / COMPLETE_MARKER).is_file()


def build_directory_atomically(
    entry: Path, build: Callable[[Path], None], info: dict | None = None
) -> Path:
    """Return ``entry``, first building it with ``build(tmp_dir)`` unless it is already complete.

    ``build`` writes its files into an empty temporary directory beside ``entry``; the
    ``COMPLETE`` marker (holding ``info`` as JSON) is added afterwards and the directory is
    renamed into place. If ``build`` raises, the temporary directory is removed and nothing is
    published. The build runs under the entry's lock (:func:`exclusive_lock`): a second process
    that wants the same entry waits for the first and then uses its result, and the temporary
    directories of builders that were killed (they no longer hold the lock) are removed.
    """
    if is_complete(entry):
        return entry
    with exclusive_lock(lock_path(entry), f"{entry}") as locked:
        if is_complete(entry):  # built by the process we waited for
            return entry
        if locked:
            remove_stale_build_directories(entry)
        tmp = Path(tempfile.mkdtemp(prefix=f"{_BUILD_PREFIX}{entry.name}-", dir=entry.parent))
        try:
            build(tmp)
            (tmp / COMPLETE_MARKER).write_text(json.dumps(info or {}, indent=2, default=str))
            _publish(tmp, entry)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return entry


def lock_path(entry: Path) -> Path:
    """The lock file that builders of ``entry`` take turns on (kept: removing it would race)."""
    return entry.parent / f".{entry.name}.lock"


def remove_stale_build_directories(entry: Path) -> None:
    """Delete the temporary directories of builders of ``entry`` that were killed mid-build.

    Call it only while holding the entry's lock: every other builder then has died.
    """
    for stale in entry.parent.glob(f"{_BUILD_PREFIX}{entry.name}-*"):
        log.info("removing %s, left by a build that was killed", stale)
        shutil.rmtree(stale, ignore_errors=True)


@contextlib.contextmanager
def exclusive_lock(path: Path, what: str) -> Iterator[bool]:
    """Hold an exclusive lock on the file ``path`` (created if missing) for the block.

    A POSIX record lock (``fcntl.lockf``): it works across hosts on NFS, and the kernel drops
    it when the holder dies, so a killed builder never blocks the next. While another process
    holds it, this logs who (host and pid, which the holder writes into the file) and waits.
    Yields True, or False where the filesystem cannot lock (then it warns and goes on unlocked).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with _thread_lock(path):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            locked = _acquire(fd, path, what)
            if locked:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{socket.gethostname()} pid {os.getpid()}\n".encode(), 0)
            yield locked
        finally:
            os.close(fd)  # releases the lock


def _acquire(fd: int, path: Path, what: str) -> bool:
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as error:
        if error.errno not in (errno.EACCES, errno.EAGAIN):
            log.warning("cannot lock %s (%s): building %s without a lock", path, error, what)
            return False
    holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
    log.info("waiting for %s to finish building %s", holder, what)
    fcntl.lockf(fd, fcntl.LOCK_EX)
    return True


def _thread_lock(path: Path) -> threading.Lock:
    with _THREAD_LOCKS_GUARD:
        return _THREAD_LOCKS.setdefault(str(path.resolve()), threading.Lock())


def _publish(tmp: Path, entry: Path) -> None:
    """Rename ``tmp`` to ``entry``, replacing an incomplete ``entry`` left by an older run."""
    if entry.exists() and not is_complete(entry):
        stale = entry.with_name(f".stale-{entry.name}-{uuid.uuid4().hex[:8]}")
        with contextlib.suppress(FileNotFoundError):  # another process moved it first
            os.rename(entry, stale)
        shutil.rmtree(stale, ignore_errors=True)
    try:
        os.rename(tmp, entry)
    except OSError:
        if not is_complete(entry):  # not a lost race with a concurrent writer
            raise


def write_directory_atomically(
    path: Path | str, build: Callable[[Path], None], *, overwrite: bool = False
) -> Path:
    """Build a directory with ``build(tmp_dir)`` beside ``path``, then rename it to ``path``.

    The files are fsynced before the rename, so a reader (or a crash) sees no directory, the old
    one or the complete new one, never a partial one. If ``build`` raises, ``path`` is untouched
    and the temporary directory is removed. An existing ``path`` is a ``FileExistsError`` unless
    ``overwrite``; it is then moved aside, replaced and removed. Returns ``path``.
    """
    path = Path(path).absolute()
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists; choose another output or overwrite it")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        build(tmp)
        for file in tmp.rglob("*"):
            if file.is_file():
                with open(file, "rb") as handle:
                    os.fsync(handle.fileno())
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp's is 0700
        old = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.old")
        if path.exists():
            os.rename(path, old)
        os.rename(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _fsync_directory(path.parent)
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_directory(directory: Path) -> None:
    """Persist a rename in ``directory`` (POSIX); a no-op where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
