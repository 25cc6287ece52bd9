"""Token embeddings (paper §3.4): looked up, then multiplied by √d_model."""

from __future__ import annotations

import math

from torch import Tensor, nn


class TokenEmbedding(nn.Module):
    """Embedding(ids) · √d_model. Its weight can be tied to the pre-softmax projection."""

    def __init__(self, vocab_size: int, d_model: int) -> None:
        super().__init__()
        # No padding_idx: some tokenizers (Marian) use the pad id as the decoder start
        # symbol, whose embedding must be learned.
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.scale = math.sqrt(d_model)

    @property
    def weight(self) -> nn.Parameter:
        return self.embedding.weight

    def forward(self, ids: Tensor) -> Tensor:
        """ids [B, T] -> [B, T, d_model]"""
        return self.embedding(ids) * self.scale
