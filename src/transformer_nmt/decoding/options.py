"""How a search looks for outputs: one object for every decoder, command and callback.

This dataclass is also the schema of the ``search`` config node: its defaults are the only ones.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SearchOptions:
    """The paper's search (§6.1): beam 4, length penalty α = 0.6, outputs of at most the source
    length + 50 tokens.

    ``beam_size=1`` is greedy search. Scores are log-probabilities divided by the GNMT length
    penalty ((5 + |Y|) / 6)^α; an output stops at EOS or after ⌊max_len_a · source length +
    max_len_b⌋ tokens. ``batch_size`` sentences are decoded at once.
    """

    beam_size: int = 4
    length_penalty: float = 0.6  # α; 0 ranks by log-probability alone
    max_len_a: float = 1.0
    max_len_b: int = 50
    batch_size: int = 64

    def __post_init__(self) -> None:
        for name in ("beam_size", "batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("length_penalty", "max_len_a", "max_len_b"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
