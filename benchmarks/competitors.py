"""The reference implementations that our Transformer is measured against, built to its shape.

* :func:`build_marian` — ``transformers.MarianMTModel`` from a ``MarianConfig`` of the same
  shape (random init, nothing downloaded); :func:`copy_into_marian` copies our weights into it,
  so that it computes the same function (checked by ``tests/benchmarks``).
* :class:`TorchTransformerNMT` — ``torch.nn.Transformer`` wrapped in the same embeddings,
  positional encoding and tied output projection as ours.

Not part of the package: the benchmark scripts and ``tests/benchmarks`` import it from here.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from transformer_nmt.model import Transformer, TransformerConfig
from transformer_nmt.model.positional import SinusoidalPositionalEncoding

# Shapes of the benchmarks: the small Multi30k model and the paper's base model.
SIZES = {
    "small": dict(d_model=256, n_heads=4, n_encoder_layers=3, n_decoder_layers=3, d_ff=1024),
    "base": dict(d_model=512, n_heads=8, n_encoder_layers=6, n_decoder_layers=6, d_ff=2048),
}
VOCAB = {"small": 8000, "base": 37000}


def our_config(size: str, vocab_size: int | None = None, **overrides) -> TransformerConfig:
    """Post-norm (the paper's, Marian's and nn.Transformer's), one shared vocabulary."""
    vocab = vocab_size or VOCAB[size]
    fields = dict(
        src_vocab_size=vocab,
        tgt_vocab_size=vocab,
        share_all_embeddings=True,
        norm="post",
        dropout=0.1,
        attention_dropout=0.0,
        max_len=256,
        pad_id=0,
        **SIZES[size],
    )
    fields.update(overrides)
    return TransformerConfig(**fields)


# -- Hugging Face Marian -------------------------------------------------------------------------


def marian_config(config: TransformerConfig, bos_id: int, eos_id: int):
    """A ``MarianConfig`` of our shape (the export's, ``transformer_nmt.export.huggingface``):
    post-norm, our activation, √d_model-scaled embeddings shared by encoder, decoder and output
    projection, sinusoidal positions, the same dropouts.

    The decoder starts from our BOS (Marian's own checkpoints start from the pad id); nothing
    is forced at the last step (``forced_eos_token_id=None``), as in our search.
    """
    from transformer_nmt.export.huggingface import hf_model_config

    per_head = config.d_model // config.n_heads
    if not config.share_all_embeddings or config.norm != "post" or config.d_k != per_head:
        raise ValueError("Marian is post-norm with one shared vocabulary and d_k = d_model / h")
    return hf_model_config(config, bos_id, eos_id, config.pad_id)


def build_marian(config: TransformerConfig, bos_id: int = 1, eos_id: int = 2, attention="sdpa"):
    """A randomly initialised ``MarianMTModel`` of our shape (``attention``: HF's
    ``attn_implementation``, "sdpa" — its default — or "eager")."""
    from transformers import MarianMTModel

    return MarianMTModel._from_config(
        marian_config(config, bos_id, eos_id), attn_implementation=attention
    )


def copy_into_marian(ours: Transformer, marian) -> None:
    """Copy our weights into ``marian`` (same shape), so that both compute the same function.

    Marian's sinusoids put every sine in the first half of the vector and every cosine in the
    second (ours interleave them, as the paper's formula does): the weights are copied with
    their hidden units in Marian's order, as the export does
    (``transformer_nmt.export.hf_parameters``). Marian's ``final_logits_bias`` is zeroed.
    """
    from transformer_nmt.export.hf_parameters import hf_state_dict

    with torch.no_grad():
        marian.load_state_dict(hf_state_dict(ours), strict=False)
        marian.final_logits_bias.zero_()
    if marian.lm_head.weight.data_ptr() != marian.model.shared.weight.data_ptr():
        raise RuntimeError("Marian's output projection is not tied to its embeddings")


# -- torch.nn.Transformer ------------------------------------------------------------------------


class TorchTransformerNMT(nn.Module):
    """``torch.nn.Transformer`` (post-norm, batch-first) inside our embeddings (√d_model-scaled,
    shared), sinusoidal positions and tied output projection; masks as nn.Transformer wants them
    (True = may *not* attend).

    nn.Transformer's layers also drop out attention weights and the FFN's hidden layer with the
    same ``dropout``; the paper, Marian and ours do neither, so those two are switched off here
    to compare the same computation. nn.Transformer always ends each stack with a LayerNorm
    (its ``encoder.norm``/``decoder.norm``), one more than post-norm needs; that stays.
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.src_vocab_size, config.d_model)
        self.scale = math.sqrt(config.d_model)
        self.positional = SinusoidalPositionalEncoding(config.d_model, config.max_len)
        self.dropout = nn.Dropout(config.dropout)
        self.transformer = nn.Transformer(
            d_model=config.d_model,
            nhead=config.n_heads,
            num_encoder_layers=config.n_encoder_layers,
            num_decoder_layers=config.n_decoder_layers,
            dim_feedforward=config.d_ff,
            dropout=config.dropout,
            batch_first=True,
            norm_first=False,
        )
        for layer in [*self.transformer.encoder.layers, *self.transformer.decoder.layers]:
            layer.dropout = nn.Identity()  # the dropout inside the FFN
            for attention in (layer.self_attn, getattr(layer, "multihead_attn", None)):
                if attention is not None:
                    attention.dropout = config.attention_dropout
        self.output_projection = nn.Linear(config.d_model, config.tgt_vocab_size, bias=False)
        for parameter in self.parameters():
            if parameter.dim() > 1:
                nn.init.xavier_uniform_(parameter)
        self.output_projection.weight = self.embedding.weight

    def embed(self, ids: Tensor) -> Tensor:
        return self.dropout(self.embedding(ids) * self.scale + self.positional(ids.size(1)))

    def forward(self, src_ids: Tensor, tgt_in_ids: Tensor) -> Tensor:
        pad_id = self.config.pad_id
        src_padding = src_ids == pad_id
        tgt_padding = tgt_in_ids == pad_id
        tgt_padding[:, 0] = False
        length = tgt_in_ids.size(1)
        future = torch.ones(length, length, dtype=torch.bool, device=tgt_in_ids.device).triu(1)
        hidden = self.transformer(
            self.embed(src_ids),
            self.embed(tgt_in_ids),
            tgt_mask=future,
            src_key_padding_mask=src_padding,
            tgt_key_padding_mask=tgt_padding,
            memory_key_padding_mask=src_padding,
            tgt_is_causal=True,
        )
        return self.output_projection(hidden)


def num_parameters(model: nn.Module) -> int:
    """Distinct trainable parameters (tied ones once; Marian's frozen sinusoids excluded)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
