"""Fingerprinted cache directories that are published atomically.

A cache entry is a directory that is built under a temporary name beside its final path and
renamed into place only after a ``COMPLETE`` marker was written into it. Readers trust an entry
only if the marker is present, so a crash mid-write never leaves an entry that a later run loads:
leftover temporary directories are never looked at, and an entry without its marker is rebuilt.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

COMPLETE_MARKER = "COMPLETE"
_HASH_CHUNK_BYTES = 1 << 20


def fingerprint(*parts: object) -> str:
    """A short stable hex digest of JSON-serialisable ``parts``."""
    payload = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(payload).hexdigest()[:16]


def file_digest(path: Path) -> str:
    """The sha256 hex digest of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def is_complete(entry: Path) -> bool:
    """Whether ``entry`` is a fully written cache directory."""
    return (entry / COMPLETE_MARKER).is_file()


def build_atomically(entry: Path, build: Callable[[Path], None], info: dict | None = None) -> Path:
    """Return ``entry``, first building it with ``build(tmp_dir)`` unless it is already complete.

    ``build`` writes its files into an empty temporary directory beside ``entry``; the marker
    (holding ``info`` as JSON) is added afterwards and the directory is renamed into place. If
    ``build`` raises, the temporary directory is removed and nothing is published. When two
    processes build the same entry concurrently, the first rename wins and the other copy is
    discarded.
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
