"""The hand-built Transformer: ``TransformerConfig`` and ``Transformer``."""

from .attention import MultiHeadAttention, scaled_dot_product_attention
from .cache import KVCache
from .config import TransformerConfig
from .transformer import Transformer

__all__ = [
    "KVCache",
    "MultiHeadAttention",
    "Transformer",
    "TransformerConfig",
    "scaled_dot_product_attention",
]
