"""Cheap, stable digests that key the data cache: of options, and of files' bytes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

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
