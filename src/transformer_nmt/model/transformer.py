"""The encoder–decoder Transformer (paper §3, Figure 1)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import Tensor, nn

from .attention import MultiHeadAttention
from .config import TransformerConfig
from .embeddings import TokenEmbedding
from .kv_cache import KVCache
from .layers import DecoderLayer, EncoderLayer
from .masks import causal_mask, decoder_self_attention_mask, padding_mask
from .positional import build_positional
from .residual import final_norm


class Encoder(nn.Module):
    """Embedding + positions, then N encoder layers (a final norm under pre-norm)."""

    def __init__(self, config: TransformerConfig, embedding: TokenEmbedding) -> None:
        super().__init__()
        self.embedding = embedding
        self.positional = build_positional(config.positional, config.d_model, config.max_len)
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.n_encoder_layers))
        self.final_norm = final_norm(config)

    def forward(self, src_ids: Tensor, src_mask: Tensor) -> Tensor:
        """src_ids [B, S] -> memory [B, S, d_model]"""
        x = self.dropout(self.embedding(src_ids) + self.positional(src_ids.size(1)))
        for layer in self.layers:
            x = layer(x, src_mask)
        return self.final_norm(x)


class Decoder(nn.Module):
    """Embedding + positions, then N decoder layers (a final norm under pre-norm)."""

    def __init__(self, config: TransformerConfig, embedding: TokenEmbedding) -> None:
        super().__init__()
        self.embedding = embedding
        self.positional = build_positional(config.positional, config.d_model, config.max_len)
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList(
            DecoderLayer(config, index=i) for i in range(config.n_decoder_layers)
        )
        self.final_norm = final_norm(config)

    def forward(
        self,
        tgt_ids: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None,
        src_mask: Tensor,
        cache: KVCache | None = None,
    ) -> Tensor:
        """tgt_ids [B, T] -> hidden states [B, T, d_model]"""
        offset = 0 if cache is None else cache.length
        x = self.embedding(tgt_ids) + self.positional(tgt_ids.size(1), offset)
        x = self.dropout(x)
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, src_mask, cache)
        return self.final_norm(x)


class Transformer(nn.Module):
    """Encoder–decoder Transformer. ``forward(src_ids, tgt_in_ids) -> logits``;
    ``forward_hidden`` and ``decode_hidden`` stop before the pre-softmax linear
    (``output_projection``).

    Masks are built here from ``config.pad_id``: callers pass token ids only.
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        src_embedding = TokenEmbedding(config.src_vocab_size, config.d_model)
        tgt_embedding = (
            src_embedding
            if config.share_all_embeddings
            else TokenEmbedding(config.tgt_vocab_size, config.d_model)
        )
        self.encoder = Encoder(config, src_embedding)
        self.decoder = Decoder(config, tgt_embedding)
        # Pre-softmax linear transformation; shares the target embedding's weight (§3.4). The
        # paper's has no bias; ``output_bias`` adds one (a learned prior over target tokens).
        self.output_projection = nn.Linear(
            config.d_model, config.tgt_vocab_size, bias=config.output_bias
        )
        self._init_parameters()
        if config.tie_embeddings:
            self.output_projection.weight = tgt_embedding.weight

    def _init_parameters(self) -> None:
        """Xavier-uniform for every matrix, as the Annotated Transformer does; the output bias
        starts at zero, so that the initial model is the paper's."""
        for parameter in self.parameters():
            if parameter.dim() > 1:
                nn.init.xavier_uniform_(parameter)
        if self.output_projection.bias is not None:
            nn.init.zeros_(self.output_projection.bias)

    def source_mask(self, src_ids: Tensor) -> Tensor:
        return padding_mask(src_ids, self.config.pad_id)

    def encode(self, src_ids: Tensor) -> Tensor:
        """src_ids [B, S] -> memory [B, S, d_model]"""
        return self.encoder(src_ids, self.source_mask(src_ids))

    def decode(
        self,
        tgt_in_ids: Tensor,
        memory: Tensor,
        src_ids: Tensor,
        cache: KVCache | None = None,
    ) -> Tensor:
        """Logits [B, T, tgt_vocab] for decoder input tgt_in_ids [B, T], memory [B, S, d_model]
        and src_ids [B, S].

        With a ``cache`` (see :meth:`new_cache`), tgt_in_ids holds only the positions after
        those already decoded, and the cache is extended in place; the cache also lets k
        consecutive rows of tgt_in_ids share one row of memory and src_ids (see
        :class:`KVCache`).
        """
        return self.output_projection(self.decode_hidden(tgt_in_ids, memory, src_ids, cache))

    def decode_hidden(
        self,
        tgt_in_ids: Tensor,
        memory: Tensor,
        src_ids: Tensor,
        cache: KVCache | None = None,
    ) -> Tensor:
        """The decoder's output [B, T, d_model]: :meth:`decode` before the pre-softmax linear."""
        if cache is None:
            if tgt_in_ids.size(0) != memory.size(0):
                raise ValueError(
                    f"{tgt_in_ids.size(0)} target rows for {memory.size(0)} sources: give one "
                    f"row of memory and src_ids per target row"
                )
            tgt_mask = decoder_self_attention_mask(tgt_in_ids, self.config.pad_id)
        elif tgt_in_ids.size(1) == 1:
            tgt_mask = None  # one new position may see every cached one
        else:
            tgt_mask = causal_mask(tgt_in_ids.size(1), tgt_in_ids.device, past=cache.length)
        return self.decoder(tgt_in_ids, memory, tgt_mask, self.source_mask(src_ids), cache)

    def forward(self, src_ids: Tensor, tgt_in_ids: Tensor) -> Tensor:
        """src_ids [B, S], tgt_in_ids [B, T] -> logits [B, T, tgt_vocab]"""
        return self.output_projection(self.forward_hidden(src_ids, tgt_in_ids))

    def forward_hidden(self, src_ids: Tensor, tgt_in_ids: Tensor) -> Tensor:
        """src_ids [B, S], tgt_in_ids [B, T] -> the decoder's output [B, T, d_model].

        ``output_projection(forward_hidden(...))`` is :meth:`forward`; a loss that applies the
        pre-softmax linear itself, a chunk of tokens at a time, starts here
        (``training/fused_loss.py``).
        """
        return self.decode_hidden(tgt_in_ids, self.encode(src_ids), src_ids)

    def new_cache(self) -> KVCache:
        """An empty key/value cache for incremental decoding with :meth:`decode`."""
        return KVCache(self.config.n_decoder_layers)

    def attention_modules(self) -> Iterator[tuple[str, MultiHeadAttention]]:
        """(name, module) of every multi-head attention, e.g. 'decoder.layers.0.cross_attention'."""
        for name, module in self.named_modules():
            if isinstance(module, MultiHeadAttention):
                yield name, module

    @contextmanager
    def capture_attention(self) -> Iterator[dict[str, Tensor]]:
        """Collect attention weights [B, h, T, S] of every attention module, for visualisation.

        ``with model.capture_attention() as maps: model(src, tgt)``; then ``maps`` holds one
        entry per module name. Outside the block the normal (fast) path is untouched.
        """
        modules = dict(self.attention_modules())
        maps: dict[str, Tensor] = {}
        for module in modules.values():
            module.capture_weights = True
        try:
            yield maps
        finally:
            for name, module in modules.items():
                module.capture_weights = False
                if module.weights is not None:
                    maps[name] = module.weights
                module.weights = None

    def num_parameters(self) -> int:
        """Number of distinct trainable parameters (tied weights counted once)."""
        return sum(p.numel() for p in self.parameters())
