"""Scaled dot-product attention and multi-head attention (paper §3.2)."""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

# The kernels F.scaled_dot_product_attention may choose on a GPU: every one but cuDNN's. cuDNN's
# builds a plan for each new (batch, length) shape, and token-bucket batches and decoding steps
# bring a new shape almost every call: on a GPU it makes train.py's step several times slower
# than the memory-efficient kernel (docs/benchmarks.md, "The GPU step").
GPU_SDPA_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    dropout: nn.Module | None = None,
) -> tuple[Tensor, Tensor]:
    """softmax(Q Kᵀ / √d_k + mask) V, written out (paper eq. 1).

    query [B, h, T, d_k], key [B, h, S, d_k], value [B, h, S, d_v]; mask broadcasts to
    [B, h, T, S] with True = may attend. Returns (output [B, h, T, d_v], weights [B, h, T, S]).
    """
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)  # [B, h, T, S]
    if mask is not None:
        # The most negative finite value, not -inf: a fully masked row gives a uniform
        # distribution instead of NaN.
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ value, weights


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, …, head_h) W^O,
    where head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    W_i^Q, W_i^K project d_model to d_k and W_i^V to d_v, per head; the h heads of each are one
    ``nn.Linear`` to h·d_k (h·d_v), and W^O maps h·d_v back to d_model.

    ``attention="manual"`` runs :func:`scaled_dot_product_attention`; ``"sdpa"`` runs
    :func:`torch.nn.functional.scaled_dot_product_attention`, the same maths in a fused kernel.
    Set ``capture_weights = True`` (see ``Transformer.capture_attention``) to keep the attention
    weights of the last call in ``self.weights``; that always takes the manual path.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_k: int,
        d_v: int,
        dropout: float = 0.0,
        attention: str = "manual",
    ) -> None:
        super().__init__()
        self.n_heads, self.d_k, self.d_v = n_heads, d_k, d_v
        self.w_q = nn.Linear(d_model, n_heads * d_k)
        self.w_k = nn.Linear(d_model, n_heads * d_k)
        self.w_v = nn.Linear(d_model, n_heads * d_v)
        self.w_o = nn.Linear(n_heads * d_v, d_model)
        self.dropout_p = dropout
        self.dropout = nn.Dropout(dropout)
        self.attention = attention
        self.capture_weights = False
        self.weights: Tensor | None = None

    def split_heads(self, x: Tensor) -> Tensor:
        """[B, T, h·d] -> [B, h, T, d] (d = d_k or d_v)"""
        batch, length, width = x.shape
        return x.view(batch, length, self.n_heads, width // self.n_heads).transpose(1, 2)

    def merge_heads(self, x: Tensor) -> Tensor:
        """[B, h, T, d_v] -> [B, T, h·d_v]"""
        batch, heads, length, width = x.shape
        return x.transpose(1, 2).reshape(batch, length, heads * width)

    def project_key_value(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """K = x W^K [B, h, S, d_k] and V = x W^V [B, h, S, d_v], split into heads.

        Exposed separately so that incremental decoding can cache them.
        """
        return self.split_heads(self.w_k(x)), self.split_heads(self.w_v(x))

    def attend(self, x: Tensor, key: Tensor, value: Tensor, mask: Tensor | None) -> Tensor:
        """x [B, T, d_model] attends to keys [B, h, S, d_k] and values [B, h, S, d_v];
        returns [B, T, d_model]."""
        query = self.split_heads(self.w_q(x))
        if self.attention == "sdpa" and not self.capture_weights:
            dropout_p = self.dropout_p if self.training else 0.0
            with sdpa_kernel(GPU_SDPA_BACKENDS) if query.is_cuda else contextlib.nullcontext():
                heads = F.scaled_dot_product_attention(
                    query, key, value, attn_mask=mask, dropout_p=dropout_p
                )
        else:
            heads, weights = scaled_dot_product_attention(
                query, key, value, mask, self.dropout if self.dropout_p > 0 else None
            )
            if self.capture_weights:
                self.weights = weights.detach()
        return self.w_o(self.merge_heads(heads))

    def forward(self, x: Tensor, memory: Tensor, mask: Tensor | None = None) -> Tensor:
        """Queries from x [B, T, d_model], keys and values from memory [B, S, d_model]."""
        key, value = self.project_key_value(memory)
        return self.attend(x, key, value, mask)
