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
    max_len_b⌋ tokens. ``batch_size`` sentences are decoded at once. ``nbest=K`` (at most
    ``beam_size``) asks for the K best hypotheses per sentence with their scores (an n-best
    list); None, the best one alone.
    """

    beam_size: int = 4
    length_penalty: float = 0.6  # α; 0 ranks by log-probability alone
    max_len_a: float = 1.0
    max_len_b: int = 50
    batch_size: int = 64
    nbest: int | None = None  # K best hypotheses per sentence, with scores; None: the best only

    def __post_init__(self) -> None:
        for name in ("beam_size", "batch_size", "nbest"):
            value = getattr(self, name)
            if name == "nbest" and value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.nbest is not None and self.nbest > self.beam_size:
            raise ValueError(
                f"nbest={self.nbest} is more than beam_size={self.beam_size}: a beam search "
                f"keeps beam_size hypotheses per sentence; raise beam_size to at least "
                f"{self.nbest} or lower nbest"
            )
        for name in ("length_penalty", "max_len_a", "max_len_b"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")

    @property
    def hypotheses(self) -> int:
        """How many hypotheses per sentence a search returns: ``nbest``, else 1."""
        return self.nbest or 1
