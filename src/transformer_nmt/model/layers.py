"""Encoder and decoder layers (paper §3.1, Figure 1)."""

from __future__ import annotations

from torch import Tensor, nn

from .attention import MultiHeadAttention
from .config import TransformerConfig
from .feedforward import PositionwiseFeedForward
from .kv_cache import KVCache
from .residual import ResidualConnection


def _attention(config: TransformerConfig) -> MultiHeadAttention:
    return MultiHeadAttention(
        config.d_model,
        config.n_heads,
        config.d_k,
        config.d_v,
        config.attention_dropout,
        config.attention,
    )


class EncoderLayer(nn.Module):
    """Self-attention, then feed-forward; each wrapped in a residual connection."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.self_attention = _attention(config)
        self.feed_forward = PositionwiseFeedForward(config.d_model, config.d_ff, config.activation)
        self.residual = nn.ModuleList(ResidualConnection(config) for _ in range(2))

    def forward(self, x: Tensor, src_mask: Tensor) -> Tensor:
        """x [B, S, d_model], src_mask [B, 1, 1, S] -> [B, S, d_model]"""
        x = self.residual[0](x, lambda y: self.self_attention(y, y, src_mask))
        return self.residual[1](x, self.feed_forward)


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention over the encoder output, then feed-forward."""

    def __init__(self, config: TransformerConfig, index: int) -> None:
        super().__init__()
        self.index = index  # this layer's slot in a KVCache
        self.self_attention = _attention(config)
        self.cross_attention = _attention(config)
        self.feed_forward = PositionwiseFeedForward(config.d_model, config.d_ff, config.activation)
        self.residual = nn.ModuleList(ResidualConnection(config) for _ in range(3))

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None,
        src_mask: Tensor,
        cache: KVCache | None = None,
    ) -> Tensor:
        """x [B, T, d_model], memory [B, S, d_model] -> [B, T, d_model]

        With a cache, x holds only the new positions: the keys and values of earlier ones, and
        those of the memory, come from the cache.
        """
        x = self.residual[0](x, lambda y: self._self_attend(y, tgt_mask, cache))
        x = self.residual[1](x, lambda y: self._cross_attend(y, memory, src_mask, cache))
        return self.residual[2](x, self.feed_forward)

    def _self_attend(self, y: Tensor, mask: Tensor | None, cache: KVCache | None) -> Tensor:
        key, value = self.self_attention.project_key_value(y)
        if cache is not None:
            key, value = cache.append_self(self.index, key, value)
        return self.self_attention.attend(y, key, value, mask)

    def _cross_attend(
        self, y: Tensor, memory: Tensor, mask: Tensor, cache: KVCache | None
    ) -> Tensor:
        if cache is None:
            return self.cross_attention(y, memory, mask)
        return cache.cross_attend(self.index, self.cross_attention, y, memory, mask)
