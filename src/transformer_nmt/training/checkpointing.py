"""Checkpoint files that are either complete or absent, never half written.

Lightning 2.6's ``TorchCheckpointIO`` saves through ``_atomic_save`` (fabric/utilities/cloud_io.py):
``torch.save`` into a ``BytesIO``, then an fsspec transaction. For a local path fsspec writes the
bytes to ``tempfile.mkstemp()`` — in the system temp dir, not beside the target — and commits with
``shutil.move``. That is an atomic rename only when the temp dir and the checkpoint share a
filesystem; otherwise ``move`` falls back to copy-then-delete, and a kill mid-copy leaves a
truncated ``last.ckpt``. Nothing is fsynced either. :class:`AtomicCheckpointIO` writes to a
temporary file in the target's own directory, fsyncs it and ``os.replace``-s it into place.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` whose local saves are atomic renames; remote URLs use Lightning's."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | os.PathLike, storage_options: Any = None
    ) -> None:
        if "://" in str(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO.save_checkpoint takes no storage_options")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                torch.save(checkpoint, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp_name, 0o666 & ~_umask())  # mkstemp makes 0600; use the usual mode
            os.replace(tmp_name, path)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise
        _fsync_directory(path.parent)
        _remove_stale_temporaries(path)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_directory(directory: Path) -> None:
    """Persist the rename itself (POSIX); a no-op where directories cannot be opened."""
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


def _remove_stale_temporaries(path: Path) -> None:
    """Delete temporaries of ``path`` left by a process killed mid-write."""
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        stale.unlink(missing_ok=True)
