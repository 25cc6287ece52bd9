"""Translate many token-id sequences of any lengths: sort by length, batch, restore order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from transformer_nmt.model import Transformer

from .batches import check_lengths, longest_first, padded
from .beam import beam_search
from .ensemble import Ensemble
from .greedy import greedy_hypotheses
from .hypothesis import Hypothesis
from .options import SearchOptions


def translate_token_ids(
    model: Transformer | Sequence[Transformer],
    sources: Sequence[Sequence[int]],
    bos_id: int,
    eos_id: int,
    options: SearchOptions | None = None,
    **overrides,
) -> list[list[int]]:
    """Best output ids (no BOS/EOS/pad) for each source id list, in the order given.

    Sources are decoded longest first in batches of ``options.batch_size`` sentences, so that a
    batch holds sentences of similar lengths and little padding; ``options.beam_size=1`` runs
    greedy search. Keyword ``overrides`` replace fields of ``options``. Each source must fit the
    encoder (``model.config.max_len`` tokens); an empty one gives []. A sequence of models is an
    ensemble.
    """
    options = replace(options or SearchOptions(), **{**overrides, "nbest": None})
    hypotheses = nbest_token_ids(model, sources, bos_id, eos_id, options)
    return [best.tokens for best, *_ in hypotheses]


def nbest_token_ids(
    model: Transformer | Sequence[Transformer],
    sources: Sequence[Sequence[int]],
    bos_id: int,
    eos_id: int,
    options: SearchOptions | None = None,
    **overrides,
) -> list[list[Hypothesis]]:
    """The ``options.nbest`` (default 1) best hypotheses for each source id list, best first, in
    the order given; batched as :func:`translate_token_ids`. An empty source gets one empty
    hypothesis.
    """
    options = replace(options or SearchOptions(), **overrides)
    model = Ensemble.of(model)
    check_lengths(sources, model.max_len, "source")
    outputs: list[list[Hypothesis]] = [[] for _ in sources]
    for chunk in longest_first([len(ids) for ids in sources], options.batch_size):
        src_ids = padded([sources[i] for i in chunk], model.pad_id, model.device)
        if options.beam_size == 1:
            found = [[h] for h in greedy_hypotheses(model, src_ids, bos_id, eos_id, options)]
        else:
            found = beam_search(model, src_ids, bos_id, eos_id, options)
        for i, hypotheses in zip(chunk, found, strict=True):
            outputs[i] = hypotheses
    return outputs
