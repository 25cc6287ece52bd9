"""Forced decoding: how probable the model finds given outputs (references) of given sources.

Teacher forcing, as in training: one pass of the decoder over BOS + the reference, the
log-probability of each reference token and of the EOS after it read off the log-softmax
(natural log, no label smoothing, no length penalty). Per token this is minus the training
loss's NLL (``training/loss.py``); an ensemble's is the mean of its models' log-probabilities,
as in its searches. A hypothesis a search found scores its own ``token_log_probs``.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from transformer_nmt.model import Transformer

from .batches import check_lengths, longest_first, padded
from .ensemble import Ensemble, mean_log_probs
from .steps import decoding_mode


def score_references(
    model: Transformer | Sequence[Transformer],
    src_ids: Tensor,
    labels: Tensor,
    bos_id: int,
) -> Tensor:
    """Log-probabilities [B, T] of ``labels`` [B, T] (reference ids + EOS, padded with the pad
    id) given src_ids [B, S] (ids + EOS, padded); 0 at padding. A sequence of models is an
    ensemble.
    """
    model = Ensemble.of(model)
    with decoding_mode(model):
        src_ids, labels = src_ids.to(model.device), labels.to(model.device)
        is_token = labels != model.pad_id
        tgt_in_ids = labels.roll(1, dims=1)  # BOS + reference: labels shifted right
        tgt_in_ids[:, 0] = bos_id
        tgt_in_ids = tgt_in_ids.masked_fill(~is_token, model.pad_id)
        per_model = [
            _label_log_probs(member(src_ids, tgt_in_ids), labels) for member in model.models
        ]
        return mean_log_probs(per_model).masked_fill(~is_token, 0.0)


def _label_log_probs(logits: Tensor, labels: Tensor) -> Tensor:
    """log_softmax(logits) at ``labels``, in float32, without a [B, T, V] log-softmax tensor."""
    logits = logits.float()
    return logits.gather(-1, labels[..., None]).squeeze(-1) - logits.logsumexp(dim=-1)


def score_token_ids(
    model: Transformer | Sequence[Transformer],
    sources: Sequence[Sequence[int]],
    references: Sequence[Sequence[int]],
    bos_id: int,
    eos_id: int,
    batch_size: int = 64,
) -> list[list[float]]:
    """The log-probability of each token of each reference id list (no BOS or EOS) and of the
    EOS after it, given the source id list (ids + EOS) of the same index; in input order.

    Pairs are scored longest reference first in batches of ``batch_size``. Sources and
    references + EOS must fit the model's ``max_len``.
    """
    if len(sources) != len(references):
        raise ValueError(f"{len(sources)} sources but {len(references)} references")
    model = Ensemble.of(model)
    labels = [[*ids, eos_id] for ids in references]
    check_lengths(sources, model.max_len, "source")
    check_lengths(labels, model.max_len, "reference")  # each with its EOS
    scores: list[list[float]] = [[] for _ in sources]
    for chunk in longest_first([len(ids) for ids in labels], batch_size):
        src_ids = padded([sources[i] for i in chunk], model.pad_id, model.device)
        batch_labels = padded([labels[i] for i in chunk], model.pad_id, model.device)
        log_probs = score_references(model, src_ids, batch_labels, bos_id).tolist()
        for i, row in zip(chunk, log_probs, strict=True):
            scores[i] = row[: len(labels[i])]
    return scores
