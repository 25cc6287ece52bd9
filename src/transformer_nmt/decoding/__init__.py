"""Decoding: KV-cached greedy and beam search, and a naive re-running reference.

``greedy_search(model, src_ids, bos_id, eos_id)`` → token ids per sentence;
``beam_search(model, src_ids, bos_id, eos_id, SearchOptions(beam_size=4))`` → hypotheses per
sentence, best first; ``translate_token_ids`` batches lists of ids of any lengths. Every search
takes one :class:`SearchOptions` (or keyword overrides of its fields).
"""

from .beam import beam_search, largest_beam_size
from .greedy import greedy_hypotheses, greedy_search, rerun_greedy_search
from .hypothesis import Hypothesis
from .lengths import gnmt_length_penalty, max_output_lengths
from .options import SearchOptions
from .translate_ids import translate_token_ids

__all__ = [
    "Hypothesis",
    "SearchOptions",
    "beam_search",
    "gnmt_length_penalty",
    "greedy_hypotheses",
    "greedy_search",
    "largest_beam_size",
    "max_output_lengths",
    "rerun_greedy_search",
    "translate_token_ids",
]
