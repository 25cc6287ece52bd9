"""One optimizer update as the mean over its target tokens: every accumulated micro-batch and
every rank, each token weighing the same (fairseq, tensor2tensor).

Each micro-batch backpropagates its loss SUM. Lightning divides what ``training_step`` returns
by ``accumulate_grad_batches`` (A) and DDP averages the gradients of the W ranks, so after the
last backward of a step every gradient holds Σ ∇loss_sum / (A·W), the sum over all micro-batches
of all ranks. Before the optimizer step, one all-reduce of the step's sums (loss, NLL, tokens T)
gives ``scale`` = A·W / T, and the gradient times ``scale`` is Σ ∇loss_sum / T: the gradient of
the token-weighted mean, whatever the micro-batches' token counts. Its norm is the raw norm
times ``scale`` (computed once, also for clipping), and it is the same on every rank, as is the
all-reduced loss, so every rank takes the same decision on a non-finite update without another
collective.

That decision is taken on the device (:class:`NonFiniteSteps`): an optimizer that takes a
``found_inf`` flag (fused Adam, as ``GradScaler`` drives it) skips the step there, and the host
reads the step's numbers only on logging steps, so a step never waits for the device.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from transformer_nmt.private_api import multiply_tensors_
from transformer_nmt.training.loss import TokenLosses, check_finite_update

CLIP_EPSILON = 1e-6  # as torch.nn.utils.clip_grad_norm_


@dataclass
class StepMeans:
    """An optimizer step's means per target token and its gradient norm, on the host."""

    loss: float
    nll: float
    grad_norm: float
    tokens: int


@dataclass
class StepTotals:
    """An optimizer step's totals over all micro-batches and ranks, scalars on the device."""

    loss_sum: Tensor  # label-smoothed cross-entropy, summed over the step's target tokens
    nll_sum: Tensor
    tokens: Tensor  # target tokens of the step, all ranks (float32, exact below 2**24)
    scale: Tensor  # multiplies the accumulated gradients into the token mean's gradient
    grad_norm: Tensor  # 2-norm of the token mean's gradient, before clipping

    def means(self) -> StepMeans:
        """The step's means and norm as Python numbers: one wait for the device."""
        tokens = self.tokens.clamp(min=1.0)
        loss, nll, grad_norm, n_tokens = torch.stack(
            [self.loss_sum / tokens, self.nll_sum / tokens, self.grad_norm, self.tokens]
        ).tolist()
        return StepMeans(loss, nll, grad_norm, int(n_tokens))


class TokenMeanUpdate:
    """Collects the sums of one optimizer step's micro-batches (:meth:`add`, no device sync) and
    turns them into the step's totals (:meth:`finish`, one all-reduce of three numbers)."""

    def __init__(self) -> None:
        self._sums: Tensor | None = None  # [loss_sum, nll_sum, tokens] of this rank

    def add(self, losses: TokenLosses) -> None:
        sums = torch.stack([losses.loss_sum.detach(), losses.nll_sum.detach(), losses.n_tokens])
        sums = sums.float()
        self._sums = sums if self._sums is None else self._sums + sums

    def finish(
        self,
        gradients: list[Tensor],
        reduce_sum: Callable[[Tensor], Tensor],
        backward_divisor: int,
    ) -> StepTotals:
        """The step's totals; ``reduce_sum`` sums a tensor over the ranks, ``backward_divisor``
        is A·W, what Lightning and DDP divided the summed gradients by."""
        if self._sums is None:
            raise RuntimeError("no training micro-batch was added before the optimizer step")
        loss_sum, nll_sum, tokens = reduce_sum(self._sums)
        self._sums = None
        scale = backward_divisor / tokens.clamp(min=1.0)
        grad_norm = torch.nn.utils.get_total_norm(gradients) * scale if gradients else scale * 0
        return StepTotals(loss_sum, nll_sum, tokens, scale, grad_norm)

    def reset(self) -> None:
        """Forget a step's sums (e.g. when training stopped before its optimizer step)."""
        self._sums = None


def apply_update_scale(
    gradients: list[Tensor],
    totals: StepTotals,
    clip_val: float | None,
    clip_algorithm: str | None,
) -> None:
    """Scale ``gradients`` in place into the token mean's, and clip them as Lightning would:
    by their norm (``totals.grad_norm``, already known: one pass over the gradients, not two;
    Lightning's default algorithm) or by value."""
    factor = totals.scale
    clip_algorithm = str(clip_algorithm or "norm").lower()
    if clip_val and clip_algorithm == "norm":
        factor = factor * (clip_val / (totals.grad_norm + CLIP_EPSILON)).clamp(max=1.0)
    multiply_tensors_(gradients, factor)
    if clip_val and clip_algorithm == "value":
        for gradient in gradients:
            gradient.clamp_(-clip_val, clip_val)


class NonFiniteSteps:
    """Notes, on the device, the first optimizer step whose loss or gradient norm is NaN or
    infinite; :meth:`check` reads the note on the host and raises ``NonFiniteLossError``.

    :meth:`note` returns the step's ``found_inf`` flag (1.0: skip it). An optimizer that honours
    it (fused Adam) skips the update on the device, so the host need not look at every step:
    :meth:`check` on logging steps and at the end of training suffices. Otherwise call
    :meth:`check` after every :meth:`note`, before the optimizer steps.
    """

    def __init__(self) -> None:
        self._first: Tensor | None = None  # [noted, step, loss, grad_norm] of the first, float64

    def note(self, step: int, totals: StepTotals, check_gradient: bool = True) -> Tensor:
        loss = totals.loss_sum / totals.tokens.clamp(min=1.0)
        grad_norm = totals.grad_norm if check_gradient else torch.zeros_like(loss)
        bad = ~(loss.isfinite() & grad_norm.isfinite())
        record = torch.stack([bad, torch.full_like(loss, step), loss, grad_norm]).double()
        if self._first is None:
            self._first = torch.zeros_like(record)
        self._first = torch.where(bad & (self._first[0] == 0), record, self._first)
        return bad.float()

    def check(self) -> None:
        """Raise ``NonFiniteLossError`` naming the first non-finite step, if any (a host read)."""
        if self._first is None:
            return
        noted, step, loss, grad_norm = self._first.tolist()
        if noted:
            check_finite_update(int(step), loss, grad_norm)
