"""Beam search, batched over sentences: all beams of all sentences decode as one [N·k] batch."""

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
from .steps import banned_token_ids, decoding_mode, start_steps


def beam_search(
    model: Transformer | Sequence[Transformer],
    src_ids: Tensor,
    bos_id: int,
    eos_id: int,
    options: SearchOptions | None = None,
    *,
    use_cache: bool = True,
    **overrides,
) -> list[list[Hypothesis]]:
    """Beam search over src_ids [B, S] (padded with ``model.config.pad_id``) with
    ``options.beam_size`` beams; keyword ``overrides`` replace fields of ``options``. A sequence
    of models is an ensemble (:mod:`~transformer_nmt.decoding.ensemble`).

    Returns per sentence the ``options.nbest`` (default 1) best hypotheses, best score first,
    where score = summed log-probability / ((5 + |Y|) / 6)^α with |Y| counting the EOS and α =
    ``options.length_penalty`` (paper: beam 4, α 0.6).

    Each step keeps the ``beam_size`` best unfinished continuations per sentence, and
    finishes those EOS continuations that rank among the ``beam_size`` best. A sentence is
    done once it has ``beam_size`` finished hypotheses, or when it reaches ⌊a·src_len + b⌋
    tokens (at most ``model.config.max_len - 1``), where its live beams end without EOS. Done
    sentences leave the batch. An empty source gives one empty hypothesis.
    ``use_cache=False`` re-runs the decoder on the full prefix every step (the reference).
    ``beam_size=1`` gives exactly :func:`~transformer_nmt.decoding.greedy_search`'s tokens.
    """
    options = replace(options or SearchOptions(), **overrides)
    beam_size = options.beam_size
    model = Ensemble.of(model)
    _check_beam_size(model, beam_size, bos_id, eos_id)
    with decoding_mode(model):
        src_ids = src_ids.to(model.device)
        limits = max_output_lengths(
            src_ids, model.pad_id, options.max_len_a, options.max_len_b, model.max_len
        )
        finished: list[list[Hypothesis]] = [[] for _ in range(src_ids.size(0))]
        sentences = (limits > 0).nonzero().squeeze(1)  # rows of src_ids still decoding
        if sentences.numel():
            steps = start_steps(
                model, src_ids.index_select(0, sentences), bos_id, eos_id, use_cache
            )
            search = _BeamState(
                sentences, limits[sentences], beam_size, eos_id, options.length_penalty
            )
            last = sentences.new_full((sentences.numel(),), bos_id)
            while True:
                rows, sources, last = search.advance(steps.log_probs(last), finished)
                if rows is None:
                    break
                steps.select(rows, sources)
        return [
            sorted(hypotheses, key=lambda h: h.score, reverse=True)[: options.hypotheses]
            or [empty_hypothesis()]
            for hypotheses in finished
        ]


class _BeamState:
    """The live beams of the sentences still decoding: rows are sentence-major, ``beams`` per
    sentence (1 at the first step, when every beam would be the same, then ``beam_size``).
    """

    def __init__(
        self, sentences: Tensor, limits: Tensor, beam_size: int, eos_id: int, alpha: float
    ) -> None:
        self.sentences = sentences  # [N] index into the caller's batch
        self.limits = limits  # [N] most tokens each sentence may output
        self.beam_size = beam_size
        self.eos_id = eos_id
        self.alpha = alpha
        self.beams = 1
        self.step = 0
        n = sentences.numel()
        self.log_prob = torch.zeros(n, device=sentences.device)  # [N·beams] summed so far
        self.tokens = sentences.new_zeros(n, 0)  # [N·beams, step] tokens so far
        self.token_log_probs = torch.zeros(n, 0, device=sentences.device)
        self.n_finished = torch.zeros_like(sentences)  # [N]

    def advance(
        self, log_probs: Tensor, finished: list[list[Hypothesis]]
    ) -> tuple[Tensor | None, Tensor | None, Tensor]:
        """Extend every live beam by the next-token ``log_probs`` [N·beams, V].

        Appends newly finished hypotheses to ``finished``; returns (rows of the old batch to
        keep, in order — None once every sentence is done; the sentences that keep decoding,
        as positions among the old N — None if all do; the tokens to feed next).
        """
        k, n = self.beam_size, self.sentences.numel()
        # Only a beam's own 2k best tokens can be among its sentence's 2k best continuations.
        candidate_log_prob, candidate_token = log_probs.topk(2 * k, dim=-1)  # [N·beams, 2k]
        total = (self.log_prob[:, None] + candidate_log_prob).view(n, -1)
        total, flat = total.topk(2 * k, dim=-1)  # [N, 2k], best first
        token = candidate_token.view(n, -1).gather(1, flat)
        token_log_prob = candidate_log_prob.view(n, -1).gather(1, flat)
        row_offsets = torch.arange(n, device=flat.device)[:, None] * self.beams
        parent = row_offsets + flat // (2 * k)  # [N, 2k] row of the beam it extends
        is_eos = token == self.eos_id
        at_limit = self.limits <= self.step + 1  # [N]: the last step these sentences may take

        # Finish EOS continuations among the k best; at the length limit, all k best.
        among_best = torch.arange(2 * k, device=flat.device) < k
        finishing = among_best & (is_eos | at_limit[:, None])
        if finishing.any():
            self._finish(finishing, parent, token, token_log_prob, total, is_eos, finished)
        done = at_limit | (self.n_finished >= k)

        # The k best continuations that did not end: a stable sort puts them first, in order.
        live = torch.sort(is_eos.to(torch.uint8), dim=1, stable=True).indices[:, :k]  # [N, k]
        parent, token = parent.gather(1, live), token.gather(1, live)
        token_log_prob, total = token_log_prob.gather(1, live), total.gather(1, live)
        sources = None
        if done.any():
            sources = (~done).nonzero().squeeze(1)
            if not sources.numel():
                return None, None, token
            parent, token = parent[sources], token[sources]
            token_log_prob, total = token_log_prob[sources], total[sources]
            self.sentences, self.limits = self.sentences[sources], self.limits[sources]
            self.n_finished = self.n_finished[sources]
        rows = parent.reshape(-1)
        token = token.reshape(-1)
        self.tokens = torch.cat([self.tokens.index_select(0, rows), token[:, None]], dim=1)
        self.token_log_probs = torch.cat(
            [self.token_log_probs.index_select(0, rows), token_log_prob.reshape(-1, 1)], dim=1
        )
        self.log_prob = total.reshape(-1)
        self.beams = k
        self.step += 1
        return rows, sources, token

    def _finish(
        self,
        finishing: Tensor,
        parent: Tensor,
        token: Tensor,
        token_log_prob: Tensor,
        total: Tensor,
        is_eos: Tensor,
        finished: list[list[Hypothesis]],
    ) -> None:
        """Turn the continuations marked in ``finishing`` [N, 2k] into hypotheses."""
        which = finishing.nonzero()  # [E, 2] (sentence position, candidate)
        sentence, candidate = which[:, 0], which[:, 1]
        rows = parent[sentence, candidate]
        tokens = torch.cat([self.tokens[rows], token[sentence, candidate, None]], dim=1)
        log_probs = torch.cat(
            [self.token_log_probs[rows], token_log_prob[sentence, candidate, None]], dim=1
        )
        self.n_finished += torch.bincount(sentence, minlength=self.n_finished.numel())
        events = zip(
            self.sentences[sentence].tolist(),
            tokens.tolist(),
            log_probs.tolist(),
            total[sentence, candidate].tolist(),
            is_eos[sentence, candidate].tolist(),
            strict=True,
        )
        for index, hypothesis_tokens, hypothesis_log_probs, log_prob, eos in events:
            length = len(hypothesis_tokens)  # |Y|, counting the EOS
            finished[index].append(
                Hypothesis(
                    tokens=hypothesis_tokens[:-1] if eos else hypothesis_tokens,
                    score=log_prob / gnmt_length_penalty(length, self.alpha),
                    log_prob=log_prob,
                    token_log_probs=hypothesis_log_probs,
                )
            )


def _check_beam_size(model: Ensemble, beam_size: int, bos_id: int, eos_id: int) -> None:
    largest = largest_beam_size(model, bos_id, eos_id)
    if beam_size > largest:
        raise ValueError(
            f"beam_size={beam_size} is too large for a target vocabulary of "
            f"{model.tgt_vocab_size} tokens: beam search ranks 2·beam_size continuations "
            f"per step, so beam_size must be at most {largest}"
        )


def largest_beam_size(
    model: Transformer | Sequence[Transformer] | Ensemble, bos_id: int, eos_id: int
) -> int:
    """The largest ``beam_size`` the model's target vocabulary allows: each step ranks
    2·beam_size continuations among the tokens a search may output."""
    model = Ensemble.of(model)
    banned = banned_token_ids(model.pad_id, bos_id, eos_id)
    return (model.tgt_vocab_size - len(banned)) // 2
