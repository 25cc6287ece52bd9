"""Greedy search: the most probable next token at every step, batched over sentences."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import Tensor

from transformer_nmt.model import Transformer

from .ensemble import Ensemble
from .hypothesis import Hypothesis, empty_hypothesis
from .lengths import gnmt_length_penalty, max_output_lengths
from .options import SearchOptions
from .steps import decoding_mode, start_steps


def greedy_search(
    model: Transformer | Sequence[Transformer],
    src_ids: Tensor,
    bos_id: int,
    eos_id: int,
    options: SearchOptions | None = None,
    **overrides,
) -> list[list[int]]:
    """Greedy translations of src_ids [B, S] (padded with ``model.config.pad_id``), KV-cached;
    a sequence of models is an ensemble (:mod:`~transformer_nmt.decoding.ensemble`).

    Returns per sentence its token ids without BOS, EOS or padding. A sentence stops at EOS
    or after ⌊a·src_len + b⌋ tokens (``options.max_len_a``, ``max_len_b``; at most
    ``model.config.max_len - 1``); an empty source gives an empty output. Keyword
    ``overrides`` replace fields of ``options`` (``max_len_b=10``).
    """
    hypotheses = greedy_hypotheses(model, src_ids, bos_id, eos_id, options, **overrides)
    return [hypothesis.tokens for hypothesis in hypotheses]


def rerun_greedy_search(
    model: Transformer | Sequence[Transformer],
    src_ids: Tensor,
    bos_id: int,
    eos_id: int,
    options: SearchOptions | None = None,
    **overrides,
) -> list[list[int]]:
    """:func:`greedy_search` without a cache: the decoder re-runs on the whole prefix every
    step (quadratic work). The reference for tests and benchmarks.
    """
    hypotheses = greedy_hypotheses(
        model, src_ids, bos_id, eos_id, options, use_cache=False, **overrides
    )
    return [hypothesis.tokens for hypothesis in hypotheses]


def greedy_hypotheses(
    model: Transformer | Sequence[Transformer],
    src_ids: Tensor,
    bos_id: int,
    eos_id: int,
    options: SearchOptions | None = None,
    *,
    use_cache: bool = True,
    **overrides,
) -> list[Hypothesis]:
    """:func:`greedy_search` returning a :class:`Hypothesis` per sentence (tokens, per-token
    log-probabilities, score under the GNMT length penalty ``options.length_penalty``);
    ``use_cache=False`` re-runs the decoder on the full prefix every step.

    Finished sentences leave the batch, so they cost nothing in later steps.
    """
    options = replace(options or SearchOptions(), **overrides)
    model = Ensemble.of(model)
    with decoding_mode(model):
        src_ids = src_ids.to(model.device)
        limits = max_output_lengths(
            src_ids, model.pad_id, options.max_len_a, options.max_len_b, model.max_len
        )
        longest = int(limits.max()) if limits.numel() else 0
        batch = src_ids.size(0)
        tokens = src_ids.new_zeros(batch, longest)
        token_log_probs = src_ids.new_zeros(batch, longest, dtype=torch.float32)
        lengths = limits.new_zeros(batch)
        ended_with_eos = limits.new_zeros(batch, dtype=bool)
        active = (limits > 0).nonzero().squeeze(1)  # rows of src_ids still decoding
        if active.numel():
            steps = start_steps(model, src_ids.index_select(0, active), bos_id, eos_id, use_cache)
            last = active.new_full((active.numel(),), bos_id)
            for step in range(longest):
                best_log_prob, best = steps.log_probs(last).max(dim=-1)
                tokens[active, step] = best
                token_log_probs[active, step] = best_log_prob
                is_eos = best == eos_id
                done = is_eos | (limits[active] <= step + 1)
                if done.any():
                    finished = active[done]
                    lengths[finished] = step + 1
                    ended_with_eos[finished] = is_eos[done]
                    running = (~done).nonzero().squeeze(1)
                    if running.numel() == 0:
                        break
                    active = active[running]
                    best = best[running]
                    steps.select(running, sources=running)
                last = best
        return _to_hypotheses(
            tokens, token_log_probs, lengths, ended_with_eos, options.length_penalty
        )


def _to_hypotheses(
    tokens: Tensor,
    token_log_probs: Tensor,
    lengths: Tensor,
    ended_with_eos: Tensor,
    length_penalty: float,
) -> list[Hypothesis]:
    hypotheses = []
    rows = zip(
        tokens.tolist(),
        token_log_probs.tolist(),
        lengths.tolist(),
        ended_with_eos.tolist(),
        strict=True,
    )
    for row_tokens, row_log_probs, length, eos in rows:
        if length == 0:
            hypotheses.append(empty_hypothesis())
            continue
        log_probs = row_log_probs[:length]
        log_prob = sum(log_probs)
        hypotheses.append(
            Hypothesis(
                tokens=row_tokens[: length - 1] if eos else row_tokens[:length],
                score=log_prob / gnmt_length_penalty(length, length_penalty),
                log_prob=log_prob,
                token_log_probs=log_probs,
            )
        )
    return hypotheses
