"""Translate many token-id sequences of any lengths: sort by length, batch, restore order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from transformer_nmt.model import Transformer

from .beam import beam_search
from .greedy import greedy_search
from .options import SearchOptions


def translate_token_ids(
    model: Transformer,
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
    encoder (``model.config.max_len`` tokens); an empty one gives [].
    """
    options = replace(options or SearchOptions(), **overrides)
    max_len = model.config.max_len
    too_long = [i for i, ids in enumerate(sources) if len(ids) > max_len]
    if too_long:
        raise ValueError(
            f"{len(too_long)} source(s) are longer than the model's max_len={max_len} tokens "
            f"(first: #{too_long[0]} with {len(sources[too_long[0]])}); truncate them first"
        )
    device = next(model.parameters()).device
    pad_id = model.config.pad_id
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]), reverse=True)
    outputs: list[list[int]] = [[] for _ in sources]
    for start in range(0, len(order), options.batch_size):
        chunk = order[start : start + options.batch_size]
        width = max(len(sources[i]) for i in chunk)
        src_ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        for row, i in enumerate(chunk):
            src_ids[row, : len(sources[i])] = torch.as_tensor(sources[i], dtype=torch.long)
        src_ids = src_ids.to(device)
        if options.beam_size == 1:
            best = greedy_search(model, src_ids, bos_id, eos_id, options)
        else:
            hypotheses = beam_search(model, src_ids, bos_id, eos_id, options)
            best = [sentence[0].tokens for sentence in hypotheses]
        for i, tokens in zip(chunk, best, strict=True):
            outputs[i] = tokens
    return outputs
