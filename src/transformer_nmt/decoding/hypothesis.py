"""One finished output of a search."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Hypothesis:
    """Output token ids (no BOS, EOS or padding) and how the search ranked them.

    ``log_prob`` is the summed log-probability of the tokens and, if the output ended with one,
    of the EOS; ``score`` is ``log_prob`` divided by the GNMT length penalty; ``token_log_probs``
    holds the log-probability of each generated token, EOS included when there was one.
    """

    tokens: list[int]
    score: float
    log_prob: float
    token_log_probs: list[float] = field(default_factory=list)


def empty_hypothesis() -> Hypothesis:
    """The translation of an empty source: no tokens, score 0."""
    return Hypothesis(tokens=[], score=0.0, log_prob=0.0)
