"""Decoding: KV-cached greedy and beam search, ensembles, forced decoding of references, and a
naive re-running reference.

``greedy_search(model, src_ids, bos_id, eos_id)`` → token ids per sentence;
``beam_search(model, src_ids, bos_id, eos_id, SearchOptions(beam_size=4, nbest=4))`` → the
n-best hypotheses per sentence, best first; ``translate_token_ids`` and ``nbest_token_ids``
batch lists of ids of any lengths; ``score_token_ids`` gives the log-probability of each token
of given references. Every search takes one :class:`SearchOptions` (or keyword overrides of its
fields), and one model or a sequence of them (an ensemble: the mean of their log-probabilities).
"""

from .beam import beam_search, largest_beam_size
from .ensemble import Ensemble, mean_log_probs
from .greedy import greedy_hypotheses, greedy_search, rerun_greedy_search
from .hypothesis import Hypothesis
from .lengths import gnmt_length_penalty, max_output_lengths
from .options import SearchOptions
from .reference_scores import score_references, score_token_ids
from .translate_ids import nbest_token_ids, translate_token_ids

__all__ = [
    "Ensemble",
    "Hypothesis",
    "SearchOptions",
    "beam_search",
    "gnmt_length_penalty",
    "greedy_hypotheses",
    "greedy_search",
    "largest_beam_size",
    "max_output_lengths",
    "mean_log_probs",
    "nbest_token_ids",
    "rerun_greedy_search",
    "score_references",
    "score_token_ids",
    "translate_token_ids",
]
