"""Next-token log-probabilities for a batch of partial outputs, with or without a KV cache.

Both classes answer the same two calls, so a search runs unchanged on either:
``log_probs(last_tokens)`` feeds one more token per row and returns [N, V] log-probabilities of
the token after it; ``select(rows, sources)`` keeps rows ``rows`` (in that order) of the
decoding state — beam search's parents, or the sentences still running — and, unless
``sources`` is None, source rows ``sources`` of the encoder side.

Rows are hypotheses: k ≥ 1 consecutive rows per source (beam search's k beams). The encoder
output is kept once per source, not once per row; so are the cross-attention keys/values, in
the :class:`~transformer_nmt.model.KVCache`. :class:`EnsembleSteps` answers the same calls for
several models, with the mean of their log-probabilities.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager

import torch
from torch import Tensor

from transformer_nmt.model import Transformer

from .ensemble import Ensemble, mean_log_probs


@contextmanager
def decoding_mode(model: Transformer | Ensemble) -> Iterator[None]:
    """Eval mode (no dropout) and no autograd for the block; each model's mode is restored
    after."""
    with ExitStack() as stack:
        for member in model.models if isinstance(model, Ensemble) else (model,):
            stack.enter_context(_eval_mode(member))
        with torch.inference_mode():
            yield


@contextmanager
def _eval_mode(model: Transformer) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def banned_token_ids(pad_id: int, bos_id: int, eos_id: int) -> set[int]:
    """Tokens a search never outputs: padding and the decoder start symbol (unless it is EOS)."""
    return {pad_id, bos_id} - {eos_id}


def start_steps(
    model: Transformer | Ensemble, src_ids: Tensor, bos_id: int, eos_id: int, use_cache: bool
) -> CachedSteps | RerunSteps | EnsembleSteps:
    """Encode src_ids [N, S] once (with each model of an ensemble) and return the step function
    over its rows."""
    if isinstance(model, Ensemble):
        if len(model.models) == 1:
            return start_steps(model.models[0], src_ids, bos_id, eos_id, use_cache)
        return EnsembleSteps(
            [start_steps(member, src_ids, bos_id, eos_id, use_cache) for member in model.models]
        )
    memory = model.encode(src_ids)
    banned = banned_token_ids(model.config.pad_id, bos_id, eos_id)
    steps = CachedSteps if use_cache else RerunSteps
    return steps(model, memory, src_ids, banned)


class _Steps:
    def __init__(
        self, model: Transformer, memory: Tensor, src_ids: Tensor, banned_ids: Iterable[int]
    ) -> None:
        self.model = model
        self.memory = memory
        self.src_ids = src_ids
        self.banned_ids = torch.tensor(sorted(set(banned_ids)), device=src_ids.device)

    def _log_probs(self, logits: Tensor) -> Tensor:
        """Log-softmax in float32 over the full vocabulary; banned tokens get -inf afterwards,
        so the remaining log-probabilities stay the model's own (not renormalised).
        """
        log_probs = logits.float().log_softmax(dim=-1)
        if self.banned_ids.numel():
            log_probs.index_fill_(1, self.banned_ids, -math.inf)
        return log_probs

    def _select_sources(self, sources: Tensor) -> None:
        self.memory = self.memory.index_select(0, sources)
        self.src_ids = self.src_ids.index_select(0, sources)


class CachedSteps(_Steps):
    """Incremental decoding: each call runs the decoder on the new token only.

    Self-attention keys/values grow in a :class:`~transformer_nmt.model.KVCache`; the
    cross-attention keys/values are projected from the memory once, on the first call.
    """

    def __init__(
        self, model: Transformer, memory: Tensor, src_ids: Tensor, banned_ids: Iterable[int]
    ) -> None:
        super().__init__(model, memory, src_ids, banned_ids)
        self.cache = model.new_cache()

    def log_probs(self, last_tokens: Tensor) -> Tensor:
        logits = self.model.decode(last_tokens[:, None], self.memory, self.src_ids, self.cache)
        return self._log_probs(logits[:, -1])

    def select(self, rows: Tensor, sources: Tensor | None) -> None:
        """Keep hypothesis rows ``rows``; and source rows ``sources`` unless None (the same
        sources, as when beam search reorders the beams of each sentence)."""
        self.cache.reorder(rows)
        if sources is not None:
            self.cache.select_sources(sources)
            self._select_sources(sources)


class RerunSteps(_Steps):
    """Naive decoding: each call re-runs the whole decoder on the full prefix (quadratic work),
    each hypothesis with its own copy of its source's memory.

    The reference that :class:`CachedSteps` must agree with, and a baseline for benchmarks.
    """

    def __init__(
        self, model: Transformer, memory: Tensor, src_ids: Tensor, banned_ids: Iterable[int]
    ) -> None:
        super().__init__(model, memory, src_ids, banned_ids)
        self.prefix: Tensor | None = None

    def log_probs(self, last_tokens: Tensor) -> Tensor:
        new = last_tokens[:, None]
        self.prefix = new if self.prefix is None else torch.cat([self.prefix, new], dim=1)
        k = self.prefix.size(0) // self.memory.size(0)  # hypotheses per source
        memory = self.memory.repeat_interleave(k, dim=0)
        logits = self.model.decode(self.prefix, memory, self.src_ids.repeat_interleave(k, dim=0))
        return self._log_probs(logits[:, -1])

    def select(self, rows: Tensor, sources: Tensor | None) -> None:
        """Keep ``rows`` and ``sources``; see :meth:`CachedSteps.select`."""
        if self.prefix is not None:
            self.prefix = self.prefix.index_select(0, rows)
        if sources is not None:
            self._select_sources(sources)


class EnsembleSteps:
    """The step function of an ensemble: every model steps on the same rows, and the next-token
    log-probabilities are the mean of theirs
    (:func:`~transformer_nmt.decoding.ensemble.mean_log_probs`). Tokens no model may output stay
    at -inf."""

    def __init__(self, members: list[CachedSteps | RerunSteps]) -> None:
        self.members = members

    def log_probs(self, last_tokens: Tensor) -> Tensor:
        return mean_log_probs([member.log_probs(last_tokens) for member in self.members])

    def select(self, rows: Tensor, sources: Tensor | None) -> None:
        """Keep ``rows`` and ``sources`` in every model; see :meth:`CachedSteps.select`."""
        for member in self.members:
            member.select(rows, sources)
