"""Label-smoothed cross-entropy (paper §5.4), as sums over tokens, and the stop on a non-finite
update.

The losses are SUMS over a batch's non-pad target tokens, never means: the training step divides
the sum of a whole optimizer step (every accumulated micro-batch, every rank) by that step's
token count (``training/update.py``), as fairseq and tensor2tensor do, so a batch of 50 tokens
weighs 50 times as much as a batch of one token, not as much.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor


@dataclass
class TokenLosses:
    """Sums over the non-pad target tokens of one batch; :meth:`means` divides by their count."""

    loss_sum: Tensor  # float32 scalar: label-smoothed cross-entropy, what is optimised
    nll_sum: Tensor  # float32 scalar: negative log-likelihood, exp(nll_sum / n) is the perplexity
    n_tokens: Tensor  # int64 scalar: non-pad target tokens (EOS included)

    def means(self) -> tuple[Tensor, Tensor]:
        """(loss, nll) per token of this batch (0 for a batch of padding only)."""
        denominator = self.n_tokens.clamp(min=1)
        return self.loss_sum / denominator, self.nll_sum / denominator


def label_smoothed_loss(logits: Tensor, labels: Tensor, pad_id: int, epsilon: float) -> TokenLosses:
    """(1 - ε)·NLL + ε·(mean over the vocabulary of -log p), summed over non-pad ``labels``.

    Per token the same value as ``F.cross_entropy(..., label_smoothing=ε, ignore_index=pad_id)``,
    but one log-softmax gives both it and the plain NLL. Computed in float32 whatever the logits'
    dtype. logits [B, T, V], labels [B, T]. ``fused_loss.fused_loss``
    computes the same from the decoder's output without the [B, T, V] tensors.
    """
    check_label_smoothing(epsilon)
    log_probs = F.log_softmax(logits.float(), dim=-1).flatten(0, -2)  # [N, V]
    labels = labels.flatten()  # [N]
    keep = labels != pad_id  # [N]
    nll_sum = F.nll_loss(log_probs, labels, ignore_index=pad_id, reduction="sum")
    smooth_sum = -(log_probs.mean(dim=-1) * keep).sum()
    loss_sum = (1.0 - epsilon) * nll_sum + epsilon * smooth_sum
    return TokenLosses(loss_sum=loss_sum, nll_sum=nll_sum.detach(), n_tokens=keep.sum())


def check_label_smoothing(epsilon: float) -> None:
    if not 0.0 <= epsilon < 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1), got {epsilon}")


class NonFiniteLossError(FloatingPointError):
    """The training loss or its gradient became NaN or infinite; the optimizer skips that update
    and the run stops, instead of training a NaN model."""


def check_finite_update(step: int, loss: float, grad_norm: float) -> None:
    """Raise :class:`NonFiniteLossError` if optimizer step ``step``'s loss (the token mean over
    all micro-batches and ranks) or gradient norm is NaN or infinite.

    Both are the same numbers on every rank (the loss is all-reduced, the gradient too), so
    every rank stops at the same step, none is left waiting in a collective.
    """
    if math.isfinite(loss) and math.isfinite(grad_norm):
        return
    what = "training loss" if not math.isfinite(loss) else "gradient"
    raise NonFiniteLossError(
        f"{what} not finite at step {step} (loss {loss}, gradient norm {grad_norm}): the "
        f"optimizer did not apply that update, so the weights are finite; training stops. Lower "
        f"the learning rate (scheduler.factor / scheduler.peak_lr) or raise scheduler.warmup, "
        f"keep trainer.gradient_clip_val set, prefer trainer.precision=bf16-mixed to 16-mixed, "
        f"then resume from the last good checkpoint with "
        f"ckpt_path=<output_dir>/checkpoints/last.ckpt"
    )
