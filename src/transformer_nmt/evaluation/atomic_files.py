"""Writing files atomically: into a temporary file beside the target, then ``os.replace``.

A reader sees either the old file or the complete new one, never a partial write.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

import torch


def _write_atomically(path: Path, mode: str, write: Callable[[IO], None]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        encoding = None if "b" in mode else "utf-8"
        with os.fdopen(handle, mode, encoding=encoding) as tmp:
            write(tmp)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return path


def write_text_atomically(path: Path | str, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns the path."""
    return _write_atomically(Path(path), "w", lambda handle: handle.write(text))


def save_torch_atomically(obj: object, path: Path | str) -> Path:
    """``torch.save(obj)`` to ``path`` atomically; returns the path."""
    return _write_atomically(Path(path), "wb", lambda handle: torch.save(obj, handle))
