"""Positional information (paper §3.5): fixed sinusoids, or learned embeddings (Table 3 row E)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class SinusoidalPositionalEncoding(nn.Module):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)),
    PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)).
    """

    def __init__(self, d_model: int, max_len: int) -> None:
        super().__init__()
        position = torch.arange(max_len, dtype=torch.float32)[:, None]  # [L, 1]
        inv_freq = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        encoding = torch.zeros(max_len, d_model)
        encoding[:, 0::2] = torch.sin(position * inv_freq)
        encoding[:, 1::2] = torch.cos(position * inv_freq[: d_model // 2])
        self.register_buffer("encoding", encoding, persistent=False)
        self.max_len = max_len

    def forward(self, length: int, offset: int = 0) -> Tensor:
        """Encodings of positions offset … offset+length-1: [length, d_model]."""
        _check_length(length + offset, self.max_len)
        return self.encoding[offset : offset + length]


class LearnedPositionalEmbedding(nn.Module):
    """One trained vector per position, the paper's alternative (Table 3 row E)."""

    def __init__(self, d_model: int, max_len: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)
        self.max_len = max_len

    def forward(self, length: int, offset: int = 0) -> Tensor:
        """Embeddings of positions offset … offset+length-1: [length, d_model]."""
        _check_length(length + offset, self.max_len)
        positions = torch.arange(offset, offset + length, device=self.embedding.weight.device)
        return self.embedding(positions)


def build_positional(kind: str, d_model: int, max_len: int) -> nn.Module:
    if kind == "sinusoidal":
        return SinusoidalPositionalEncoding(d_model, max_len)
    return LearnedPositionalEmbedding(d_model, max_len)


def _check_length(length: int, max_len: int) -> None:
    if length > max_len:
        raise ValueError(
            f"sequence of {length} positions exceeds max_len={max_len}; "
            f"truncate the input or raise model.max_len"
        )
