"""Residual connection around a sub-layer, with LayerNorm after it (post) or before it (pre)."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn


class ResidualConnection(nn.Module):
    """post: LayerNorm(x + Dropout(Sublayer(x)))   — the paper (§5.4)
    pre:  x + Dropout(Sublayer(LayerNorm(x)))     — pre-norm, as in tensor2tensor v2
    """

    def __init__(self, d_model: int, dropout: float, norm: str) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.pre_norm = norm == "pre"

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        if self.pre_norm:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))
