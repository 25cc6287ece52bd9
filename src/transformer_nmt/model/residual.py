"""Residual connection around a sub-layer, with the normalisation layer after it (post) or before
it (pre); every normalisation layer of the model is built here."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from .config import TransformerConfig


class RMSNorm(nn.Module):
    """RMSNorm(x) = g · x / sqrt(mean(x²) + ε) over d_model (Zhang & Sennrich, 2019): LayerNorm
    without subtracting the mean and without the bias."""

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps  # LayerNorm's
        self.weight = nn.Parameter(torch.ones(d_model))  # the gain g

    def forward(self, x: Tensor) -> Tensor:
        y = x.float()  # in float32, as autocast runs LayerNorm; returned in x's dtype
        y = self.weight * y / torch.sqrt(y.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return y.type_as(x)


def norm_layer(config: TransformerConfig) -> nn.Module:
    """The normalisation layer ``config.norm_layer`` names, over d_model: LayerNorm (§3.1) or
    RMSNorm."""
    if config.norm_layer == "rmsnorm":
        return RMSNorm(config.d_model)
    return nn.LayerNorm(config.d_model)


def final_norm(config: TransformerConfig) -> nn.Module:
    """What ends a stack: under pre-norm a normalisation layer (the last sub-layer's output is not
    normalised), under post-norm nothing (it is)."""
    return norm_layer(config) if config.norm == "pre" else nn.Identity()


class ResidualConnection(nn.Module):
    """post: Norm(x + Dropout(Sublayer(x)))   — the paper (§5.4)
    pre:  x + Dropout(Sublayer(Norm(x)))     — pre-norm, as in tensor2tensor v2
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.norm = norm_layer(config)
        self.dropout = nn.Dropout(config.dropout)
        self.pre_norm = config.norm == "pre"

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        if self.pre_norm:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))
