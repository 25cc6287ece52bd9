"""Where the data cache lives by default."""

from __future__ import annotations

import os

DEFAULT_CACHE_DIR = "~/.cache/transformer_nmt"


def default_cache_dir() -> str:
    """``$TRANSFORMER_NMT_CACHE`` if set, else ``~/.cache/transformer_nmt`` (not expanded)."""
    return os.environ.get("TRANSFORMER_NMT_CACHE") or DEFAULT_CACHE_DIR
