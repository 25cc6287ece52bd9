"""The hand-built Transformer: ``TransformerConfig`` and ``Transformer``."""

from .attention import MultiHeadAttention, scaled_dot_product_attention
from .config import TransformerConfig
from .kv_cache import KVCache
from .transformer import Transformer

__all__ = [
    "KVCache",
    "MultiHeadAttention",
    "Transformer",
    "TransformerConfig",
    "scaled_dot_product_attention",
]
