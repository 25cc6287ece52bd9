"""Keep freed host memory in glibc's heap: faster training on a CPU.

By default glibc serves every allocation over 32 MiB with a fresh ``mmap`` and returns it to
the kernel when freed. A training step makes several such tensors (the logits [N, V], their
log-probabilities and gradients: 65 MB each at N = 2048, V = 8000), and each pays a page fault
per 4 KiB page on first touch. Raising the mmap and
trim thresholds (what ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` do at start-up)
lets those pages be reused; the price is that the resident size stays at its peak. What it
gains: docs/benchmarks.md, "Training step".
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

# mallopt(3) parameters, from glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def _libc():
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name) if name else None


def release_free_memory() -> bool:
    """Hand the heap's free pages back to the kernel now (``malloc_trim(0)``, whatever the trim
    threshold); returns whether it took effect (False where the C library is not glibc)."""
    try:
        return bool(_libc().malloc_trim(0))
    except (OSError, AttributeError):
        return False


def keep_freed_memory(mmap_threshold: int = 1 << 30, trim_threshold: int = 1 << 31) -> bool:
    """Serve blocks up to ``mmap_threshold`` bytes from the heap and give freed memory back to
    the kernel only above ``trim_threshold`` free bytes. Affects the whole process; returns
    whether it took effect (False where the C library is not glibc).
    """
    try:
        mallopt = _libc().mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS, Windows)
        return False
    kept = bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(
        mallopt(_M_TRIM_THRESHOLD, trim_threshold)
    )
    log.debug("glibc keeps freed memory in the heap: %s", kept)
    return kept
