"""The pre-softmax linear and the label-smoothed cross-entropy together, a chunk of tokens at a
time: the same sums and gradients as ``output_projection`` + ``label_smoothed_loss``, without a
[tokens, vocabulary] tensor.

The plain path makes ``logits = hidden @ weight.T`` [N, V], its log-softmax and the gradients of
both, each N·V float32 values (3.7 GB each at N = 25,000 tokens, V = 37,000). Here the non-pad
tokens are taken ``chunk_size`` rows at a time, and the forward pass also computes each chunk's
share of the gradient, so at most one [chunk_size, V] block lives at once (the idea of
Liger-Kernel's fused linear cross-entropy and of Wijmans et al. 2024, "Cut Your Losses in
Large-Vocabulary Language Models"; this is a plain-PyTorch one).

Per non-pad token with logits z = W h [V], label y and smoothing ε:

* nll      = logsumexp(z) - z[y]
* smooth   = mean over v of -log p[v] = logsumexp(z) - mean(z)
* loss     = (1 - ε)·nll + ε·smooth        (``F.cross_entropy(label_smoothing=ε)`` per token)
* ∂loss/∂z = softmax(z) - (1 - ε)·onehot(y) - ε/V
* ∂loss/∂h = (∂loss/∂z) W,   ∂loss/∂W = Σ_tokens (∂loss/∂z)ᵀ h

Besides the three matrix products only four passes go over a [C, V] block (max, subtract, exp,
sum): the softmax's normalisation, the mean logit and the uniform -ε/V are moved onto [C, d] and
[d] terms. Pad rows are computed, as on the plain path, and masked: the chunks follow from the
shape alone, so nothing waits for the device to count the real rows. The gradients are ordinary
autograd gradients of ``loss_sum``: backward only scales the ones computed in forward by its
incoming gradient, so a weight tied to an embedding receives both contributions and DDP
all-reduces them as usual. A forward whose loss is never backpropagated wastes that work:
evaluate under ``torch.no_grad()`` (Lightning does), where only the loss is computed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx

from transformer_nmt.training.loss import TokenLosses, check_label_smoothing

# Tokens per chunk (docs/benchmarks.md, "The loss"): a [1024, V] float32 block is 32 MiB at
# V = 8000 and 145 MiB at V = 37000.
DEFAULT_CHUNK_SIZE = 1024


@torch.compiler.disable  # a loop over a data-dependent number of chunks: always eager
def fused_loss(
    hidden: Tensor,
    weight: Tensor,
    labels: Tensor,
    pad_id: int,
    epsilon: float,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> TokenLosses:
    """Label-smoothed cross-entropy of ``hidden @ weight.T``, summed over non-pad ``labels``.

    hidden [N, d] or [B, T, d] (any float dtype; the decoder's output), weight [V, d] (the
    pre-softmax linear's, tied or not), labels [N] or [B, T]. The three matrix products run in
    float32, or under autocast in its dtype (bf16 logits, as ``F.linear`` gives the plain path
    there); the softmax, the sums and the weight's gradient are float32 either way. Gradients
    come back in the inputs' dtypes, computed during this call only where grad mode is on and
    the input requires grad.
    """
    check_label_smoothing(epsilon)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size <= 0:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    if weight.dim() != 2 or hidden.size(-1) != weight.size(1):
        raise ValueError(
            f"expected hidden [..., d] and weight [V, d], got {tuple(hidden.shape)} and "
            f"{tuple(weight.shape)}"
        )
    hidden = hidden.reshape(-1, hidden.size(-1))  # [N, d]
    labels = labels.reshape(-1)  # [N]
    if labels.size(0) != hidden.size(0):
        raise ValueError(f"{hidden.size(0)} hidden rows but {labels.size(0)} labels")
    if labels.is_floating_point() or labels.is_complex():
        raise TypeError(f"labels must be integer token ids, got {labels.dtype}")
    # Function.forward always runs with grad mode off: decide here what needs gradients.
    grad_enabled = torch.is_grad_enabled()
    device_type = hidden.device.type
    autocast = torch.is_autocast_enabled(device_type)
    matmul_dtype = torch.get_autocast_dtype(device_type) if autocast else torch.float32
    loss_sum, nll_sum, n_tokens = _ChunkedLinearLabelSmoothedLoss.apply(
        hidden,
        weight,
        labels,
        pad_id,
        epsilon,
        chunk_size,
        grad_enabled and hidden.requires_grad,
        grad_enabled and weight.requires_grad,
        matmul_dtype,
    )
    return TokenLosses(loss_sum=loss_sum, nll_sum=nll_sum, n_tokens=n_tokens)


class _ChunkedLinearLabelSmoothedLoss(torch.autograd.Function):
    """Forward computes the sums and, if asked, the gradients; backward scales them.

    Outputs (loss_sum, nll_sum, n_tokens); only loss_sum is differentiable. Backward may run
    again with ``retain_graph=True`` (each run scales the same saved gradients); second-order
    gradients are refused with an error rather than silently taken as zero.
    """

    @staticmethod
    def forward(
        ctx: FunctionCtx,
        hidden: Tensor,  # [N, d]
        weight: Tensor,  # [V, d]
        labels: Tensor,  # [N]
        pad_id: int,
        epsilon: float,
        chunk_size: int,
        compute_grad_hidden: bool,
        compute_grad_weight: bool,
        matmul_dtype: torch.dtype,
    ) -> tuple[Tensor, Tensor, Tensor]:
        device = hidden.device
        vocab_size = weight.size(0)
        keep = labels != pad_id  # [N], rows with a real target
        compute_grad = compute_grad_hidden or compute_grad_weight
        with torch.autocast(device_type=device.type, enabled=False):
            weight_f32 = weight.float()  # [V, d]; no copy for a float32 weight
            weight_mm = weight_f32.to(matmul_dtype)  # [V, d]; the same tensor in float32
            weight_mean = weight_f32.mean(dim=0)  # [d]: the mean logit is hidden @ weight_mean
            grad_hidden = hidden.new_zeros(hidden.shape) if compute_grad_hidden else None
            grad_weight_f32 = (  # [V, d], summed over the chunks in float32
                weight_f32.new_zeros(weight_f32.shape) if compute_grad_weight else None
            )
            hidden_sum = weight_f32.new_zeros(weight_f32.size(1))  # [d], Σ of the real rows
            nll_total = torch.zeros((), dtype=torch.float64, device=device)
            smooth_total = torch.zeros((), dtype=torch.float64, device=device)
            # Every row, in order, pad rows masked: the chunks follow from the shape alone, so
            # nothing waits for the device to count the real rows.
            for start in range(0, labels.size(0), chunk_size):
                rows = slice(start, start + chunk_size)
                hidden_chunk = hidden[rows].float()  # [C, d]
                real = keep[rows].unsqueeze(1)  # [C, 1]
                chunk = _chunk_forward(
                    hidden_chunk, weight_mm, weight_mean, labels[rows].unsqueeze(1), epsilon,
                    compute_grad,
                )  # fmt: skip
                nll_total += torch.where(real[:, 0], chunk.nll, 0.0).sum(dtype=torch.float64)
                smooth_total += torch.where(real[:, 0], chunk.smooth, 0.0).sum(dtype=torch.float64)
                if not compute_grad:
                    continue
                # ∂loss/∂logits = exp_block / Σexp - ε/V on real rows, 0 on pad rows: 1/Σexp
                # (0 on pad rows) is a row scale of the [C, d] sides, and the -ε/V term is
                # -ε·weight_mean per real row of ∂hidden and -(ε/V)·Σ hidden per row of ∂weight
                # (once, after the loop).
                row_scale = torch.where(real, chunk.inverse_sum.unsqueeze(1), 0.0)  # [C, 1]
                exp_block = chunk.exp_block.to(matmul_dtype)  # [C, V]; itself in float32
                if grad_hidden is not None:  # [C, V] @ [V, d]
                    grad_hidden_chunk = (exp_block @ weight_mm).float().mul_(row_scale)
                    if epsilon:
                        grad_hidden_chunk.sub_(real * (epsilon * weight_mean))
                    grad_hidden[rows] = grad_hidden_chunk
                if grad_weight_f32 is not None:  # += [V, C] @ [C, d]
                    scaled_hidden = (hidden_chunk * row_scale).to(matmul_dtype)
                    if matmul_dtype == torch.float32:
                        grad_weight_f32.addmm_(exp_block.t(), scaled_hidden)
                    else:  # accumulated in float32 over the chunks
                        grad_weight_f32 += exp_block.t() @ scaled_hidden
                    hidden_sum += (hidden_chunk * real).sum(dim=0)
                del chunk, exp_block  # free the [C, V] block before the next chunk's
            if grad_weight_f32 is not None and epsilon:
                grad_weight_f32.sub_((epsilon / vocab_size) * hidden_sum)  # every row alike
        loss_sum = ((1.0 - epsilon) * nll_total + epsilon * smooth_total).float()
        nll_sum = nll_total.float()
        n_tokens = keep.sum()
        grad_weight = None if grad_weight_f32 is None else grad_weight_f32.to(weight.dtype)
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.mark_non_differentiable(nll_sum, n_tokens)
        return loss_sum, nll_sum, n_tokens

    @staticmethod
    def backward(
        ctx: FunctionCtx, grad_loss_sum: Tensor, _grad_nll_sum: Tensor, _grad_n_tokens: Tensor
    ) -> tuple[Tensor | None, ...]:
        if torch.is_grad_enabled():  # backward(create_graph=True) or autograd.grad(...) alike
            raise RuntimeError(
                "fused_loss has no second-order gradients (create_graph=True); use the plain "
                "output_projection + label_smoothed_loss for those"
            )
        grad_hidden, grad_weight = ctx.saved_tensors  # raises if freed by an earlier backward
        needs_hidden, needs_weight = ctx.needs_input_grad[:2]
        if (needs_hidden and grad_hidden is None) or (needs_weight and grad_weight is None):
            raise RuntimeError(
                "fused_loss computed no gradients in forward (grad mode "
                "was off or the input did not require grad then); call it again with grad "
                "enabled and requires_grad set"
            )
        grad_hidden = _scaled(grad_hidden, grad_loss_sum) if needs_hidden else None
        grad_weight = _scaled(grad_weight, grad_loss_sum) if needs_weight else None
        return grad_hidden, grad_weight, None, None, None, None, None, None, None


def _scaled(grad: Tensor, scale: Tensor) -> Tensor:
    """grad · scale (a scalar) in float32, returned in grad's dtype; out of place, so the saved
    gradient stays intact for another backward (``retain_graph=True``)."""
    if grad.dtype == scale.dtype:
        return grad * scale
    return (grad.float() * scale.float()).to(grad.dtype)


@dataclass
class _ChunkResult:
    """Losses of a chunk of C tokens and, if asked, the pieces of its ∂loss/∂logits [C, V]:
    ``exp_block * inverse_sum[:, None] - ε/V``."""

    nll: Tensor  # [C]
    smooth: Tensor  # [C], mean over the vocabulary of -log p
    exp_block: Tensor | None = None  # [C, V], exp(z - max z) with (1-ε)·Σexp subtracted at y
    inverse_sum: Tensor | None = None  # [C], 1 / Σ_v exp(z_v - max z)


def _chunk_forward(
    hidden_chunk: Tensor,  # [C, d] float32
    weight_mm: Tensor,  # [V, d] in the matmul dtype
    weight_mean: Tensor,  # [d] float32
    targets: Tensor,  # [C, 1] int
    epsilon: float,
    compute_grad: bool,
) -> _ChunkResult:
    """One chunk: float32 logits (the product in ``weight_mm``'s dtype), then in place on the
    same [C, V] buffer z - max, exp, the one-hot."""
    logits = (hidden_chunk.to(weight_mm.dtype) @ weight_mm.t()).float()  # [C, V]
    row_max = logits.amax(dim=1, keepdim=True)  # [C, 1]
    shifted = logits.sub_(row_max)  # [C, V], z - max(z)
    target_shifted = shifted.gather(1, targets).squeeze(1)  # [C], z[y] - max(z)
    exp_block = shifted.exp_()  # [C, V]
    sum_exp = exp_block.sum(dim=1)  # [C]
    log_sum_exp_shifted = sum_exp.log()  # [C], logsumexp(z) - max(z)
    mean_logit = hidden_chunk @ weight_mean  # [C]
    nll = log_sum_exp_shifted - target_shifted
    smooth = log_sum_exp_shifted + row_max.squeeze(1) - mean_logit
    if not compute_grad:
        return _ChunkResult(nll=nll, smooth=smooth)
    # softmax - (1-ε)·onehot = (exp_block - (1-ε)·Σexp·onehot) / Σexp
    exp_block.scatter_add_(1, targets, (sum_exp * (epsilon - 1.0)).unsqueeze(1))
    return _ChunkResult(nll, smooth, exp_block=exp_block, inverse_sum=sum_exp.reciprocal())
