"""Atomic writes: a reader sees the old version or the complete new one, never a partial write,
whatever kills the writer.

Everything is written under a temporary name in the target's own directory (so the final rename
never crosses a filesystem), fsynced, then renamed into place with ``os.replace``; the directory
is fsynced so that the rename itself survives a crash. Files: :func:`write_file_atomically`.
Output directories (an exported model): :func:`write_directory_atomically`. Cache entries,
which several processes may want at once: :func:`build_directory_atomically`, which builds an
entry once under a per-path lock (:func:`path_lock`) and marks it ``COMPLETE``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from filelock import FileLock, Timeout

log = logging.getLogger(__name__)

COMPLETE_MARKER = "COMPLETE"
_BUILD_PREFIX = ".tmp-"


# Why a write failed that the user, not the code, must fix.
_UNWRITABLE = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}


class WriteError(OSError):
    """A file or directory could not be written because of where it goes: a full disk or quota,
    a read-only filesystem, no permission. The message names the path, the cause, what was left
    as it was and, for a full disk, how much space the write needed."""

    def __init__(self, code: int, message: str, filename: str) -> None:
        super().__init__(code, message, filename)
        self.message = message

    def __str__(self) -> str:
        return self.message


def unwritable(error: OSError, path: Path, size: int | None = None) -> WriteError | None:
    """The :class:`WriteError` that ``error`` (met writing ``path``) stands for, if it is one.

    ``size``: the bytes the write needs, if the caller knows them (a full disk's message says)."""
    if isinstance(error, WriteError) or error.errno not in _UNWRITABLE:
        return None
    cause = error.strerror or str(error)
    hint = "choose a location where you can write"
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        free = _free_bytes(path)
        need = f"it needs about {_megabytes(size)}" if size else "it needs more space"
        have = f", {_megabytes(free)} are free there" if free is not None else ""
        hint = f"{need}{have}; free some space or write elsewhere"
    message = f"cannot write {path}: {cause}; what was there is left as it was; {hint}"
    return WriteError(error.errno, message, str(path))


@contextlib.contextmanager
def reporting_unwritable(path: Path, size: int | None = None) -> Iterator[None]:
    """Raise an ``OSError`` of the block that :func:`unwritable` recognises as its
    :class:`WriteError` (chained to it); others pass unchanged."""
    try:
        yield
    except OSError as error:
        problem = unwritable(error, path, size)
        if problem is None:
            raise
        raise problem from error


def _free_bytes(path: Path) -> int | None:
    for candidate in (path, *path.parents):
        try:
            return shutil.disk_usage(candidate).free
        except OSError:
            continue
    return None


def _megabytes(size: int) -> str:
    return f"{size / 1e6:,.1f} MB"


def write_file_atomically(
    path: Path | str, write: Callable[[IO], None], binary: bool, size: int | None = None
) -> Path:
    """Call ``write(handle)`` on a temporary file beside ``path``, then rename it over ``path``.

    If ``write`` raises, ``path`` is untouched and the temporary file is removed; a full disk, a
    read-only filesystem or a missing permission raise :class:`WriteError` (``size``: the bytes
    the write needs, for its message). The new file gets the usual permissions (0666 less the
    umask), not ``mkstemp``'s 0600. Returns ``path``.
    """
    path = Path(path)
    with reporting_unwritable(path, size):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        encoding = None if binary else "utf-8"
        try:
            with os.fdopen(fd, "wb" if binary else "w", encoding=encoding) as tmp:
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


def remove_stale_temporaries(path: Path | str) -> None:
    """Delete the temporary files of ``path`` that a writer killed mid-write left behind."""
    path = Path(path)
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        stale.unlink(missing_ok=True)


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


def write_directory_atomically(
    path: Path | str,
    build: Callable[[Path], None],
    *,
    overwrite: bool = False,
    size: int | None = None,
) -> Path:
    """Build a directory with ``build(tmp_dir)`` beside ``path``, then rename it to ``path``.

    A reader (or a crash) sees no directory, the old one or the complete new one, never a
    partial one. If ``build`` raises, ``path`` is untouched and the temporary directory is
    removed; a full disk, a read-only filesystem or a missing permission raise
    :class:`WriteError` (``size``: about how many bytes the directory takes, for its message).
    An existing ``path`` is a ``FileExistsError`` unless ``overwrite``; it is then moved aside,
    replaced and removed. Every file gets the usual permissions (0666 less the umask). Returns
    ``path``.
    """
    path = Path(path).absolute()
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists; choose another output or overwrite it")
    with reporting_unwritable(path, size):
        path.parent.mkdir(parents=True, exist_ok=True)
        with _built_beside(path, f".{path.name}.", build) as tmp:
            old = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.old")
            if path.exists():
                os.rename(path, old)
            os.rename(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
    _fsync_directory(path.parent)
    return path


def is_complete(entry: Path) -> bool:
    """Whether ``entry`` is a fully written directory (see :func:`build_directory_atomically`)."""
    return (entry / COMPLETE_MARKER).is_file()


def build_directory_atomically(
    entry: Path, build: Callable[[Path], None], info: dict | None = None
) -> Path:
    """Return the cache entry ``entry``, first building it with ``build(tmp_dir)`` unless it is
    already complete.

    ``build`` writes its files into an empty temporary directory beside ``entry``; the
    ``COMPLETE`` marker (holding ``info`` as JSON) is added afterwards and the directory is
    renamed into place; readers trust only entries that carry the marker. If ``build`` raises,
    nothing is published. The build runs under the entry's :func:`path_lock`: a second process
    or thread that wants the same entry waits for the first and then uses its result, and the
    temporary directories of builders that were killed are removed.
    """
    if is_complete(entry):
        return entry
    with path_lock(lock_path(entry), f"building {entry}"):
        if is_complete(entry):  # built by the holder we waited for
            return entry
        remove_stale_build_directories(entry)

        def build_with_marker(tmp: Path) -> None:
            build(tmp)
            (tmp / COMPLETE_MARKER).write_text(json.dumps(info or {}, indent=2, default=str))

        with _built_beside(entry, f"{_BUILD_PREFIX}{entry.name}-", build_with_marker) as tmp:
            if entry.exists():  # an incomplete entry: a crash outside this module's writers
                stale = entry.with_name(f".stale-{entry.name}-{uuid.uuid4().hex[:8]}")
                os.rename(entry, stale)
                shutil.rmtree(stale, ignore_errors=True)
            os.rename(tmp, entry)
    _fsync_directory(entry.parent)
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
def path_lock(path: Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` (created if missing, and kept) for the block,
    against other processes, other hosts and other threads of this process.

    A :class:`filelock.FileLock`, that is ``flock(2)`` on an open file of its own: threads
    exclude each other like processes do; the kernel drops the lock when its holder dies, so a
    killed builder never blocks the next one; and Linux NFS clients send ``flock`` to the
    server as a whole-file POSIX lock, so hosts sharing a cache over NFS take turns too (unless
    the share is mounted ``nolock`` or ``local_lock=flock``, which make locks host-local). Not
    :class:`filelock.SoftFileLock`: its lock is a file that exists while held, which a killed
    holder leaves behind, and then every later build waits on a dead process. Where a
    filesystem has no ``flock`` at all, filelock falls back to that soft lock with a warning.

    While another process holds the lock, this logs who (host and pid, which the holder writes
    into the file) and waits.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path)
    try:
        lock.acquire(blocking=False)
    except Timeout:
        log.info("waiting for %s to finish %s", _lock_holder(path), what)
        lock.acquire()
    try:
        path.write_text(f"{socket.gethostname()} pid {os.getpid()}\n")
        yield
    finally:
        lock.release()


def _lock_holder(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip() or "another process"
    except OSError:
        return "another process"


@contextlib.contextmanager
def _built_beside(target: Path, prefix: str, build: Callable[[Path], None]) -> Iterator[Path]:
    """A temporary directory beside ``target``, filled by ``build`` and fsynced, for the block
    to rename into place; removed afterwards if it is still there."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=target.parent))
    try:
        build(tmp)
        umask = _umask()
        for entry in tmp.rglob("*"):
            if entry.is_file() and not entry.is_symlink():
                with open(entry, "rb") as handle:
                    os.fsync(handle.fileno())
                os.chmod(entry, 0o666 & ~umask)  # a writer's own mode (safetensors: 0600)
            elif entry.is_dir() and not entry.is_symlink():
                os.chmod(entry, 0o777 & ~umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's is 0700
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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
