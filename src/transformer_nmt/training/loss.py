"""Label-smoothed cross-entropy (paper §5.4) and the stop on a non-finite training loss."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass
class TokenLosses:
    """Means over the non-pad target tokens of one batch."""

    loss: Tensor  # label-smoothed cross-entropy: what is optimised
    nll: Tensor  # plain negative log-likelihood: exp(nll) is the perplexity
    n_tokens: int


def label_smoothed_loss(logits: Tensor, labels: Tensor, pad_id: int, epsilon: float) -> TokenLosses:
    """(1 - ε)·NLL + ε·(mean over the vocabulary of -log p), ignoring ``pad_id`` labels.

    The same value as ``F.cross_entropy(..., label_smoothing=ε, ignore_index=pad_id)``, but one
    log-softmax gives both it and the plain NLL. Computed in float32 whatever the logits' dtype.
    logits [B, T, V], labels [B, T].
    """
    if not 0.0 <= epsilon < 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1), got {epsilon}")
    log_probs = F.log_softmax(logits.float(), dim=-1).flatten(0, 1)
    labels = labels.flatten()
    keep = labels != pad_id
    n_tokens = int(keep.sum())
    nll = F.nll_loss(log_probs, labels, ignore_index=pad_id, reduction="sum")
    smooth = -(log_probs.mean(dim=-1) * keep).sum()
    denominator = max(n_tokens, 1)
    nll = nll / denominator
    loss = (1.0 - epsilon) * nll + epsilon * smooth / denominator
    return TokenLosses(loss=loss, nll=nll, n_tokens=n_tokens)


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite; the run stops instead of training a NaN model."""


def check_finite_loss(loss: Tensor, step: int, any_rank_failed: bool | None = None) -> None:
    """Raise :class:`NonFiniteLossError` if ``loss`` (or, if given, any rank's loss) is not finite.

    Under DDP pass ``any_rank_failed`` (the all-reduced verdict) so that every rank stops
    together instead of the others waiting forever in the next gradient all-reduce.
    """
    failed = not bool(torch.isfinite(loss)) if any_rank_failed is None else any_rank_failed
    if failed:
        raise NonFiniteLossError(
            f"training loss is not finite at step {step} (this rank: {loss.item()}): stopping "
            f"rather than training a "
            f"NaN model. Lower the learning rate (scheduler.factor / scheduler.peak_lr) or raise "
            f"scheduler.warmup, keep trainer.gradient_clip_val set, prefer "
            f"trainer.precision=bf16-mixed to 16-mixed, then resume from the last good "
            f"checkpoint with ckpt_path=<output_dir>/checkpoints/last.ckpt"
        )
