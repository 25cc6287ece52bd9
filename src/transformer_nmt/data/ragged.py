"""Ragged arrays: runs of different lengths stored back to back in one flat array."""

from __future__ import annotations

import numpy as np


def ragged_positions(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The positions ``start, start + 1, …, start + length - 1`` of every run, concatenated.

    ``flat[ragged_positions(starts, lengths)]`` gathers the runs; assigning to it scatters them.
    """
    ends = np.cumsum(lengths)
    shift = np.repeat(np.asarray(starts) - (ends - lengths), lengths)
    return np.arange(len(shift)) + shift
