"""Writing files and directories atomically: a reader sees the old version or the complete new
one, never a partial write, whatever kills the writer.

A file is written into a temporary file in the target's own directory (so the final rename never
crosses a filesystem), flushed and fsynced, then ``os.replace``-d over the target; the directory
is fsynced so the rename itself survives a crash. A directory (a cache entry) is built under a
temporary name beside its final path, marked ``COMPLETE`` and then renamed into place; readers
trust only entries that carry the marker.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO

COMPLETE_MARKER = "COMPLETE"


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
    published. When two processes build the same entry at once, the first rename wins and the
    other copy is discarded.
    """
    if is_complete(entry):
        return entry
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{entry.name}-", dir=entry.parent))
    try:
        build(tmp)
        (tmp / COMPLETE_MARKER).write_text(json.dumps(info or {}, indent=2, default=str))
        _publish(tmp, entry)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return entry


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
