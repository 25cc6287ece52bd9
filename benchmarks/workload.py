"""What the benchmarks run: our Transformer at two sizes, the reference implementations of the
same maths built to its shape, and token-bucket batches of random ids.

* :func:`build_marian` — ``transformers.MarianMTModel`` of our shape (nothing downloaded);
  :func:`copy_into_marian` gives it our weights, so it computes our function
  (``tests/benchmarks/test_reference_equivalence.py``).
* :class:`TorchTransformerNMT` — ``torch.nn.Transformer`` inside our embeddings, sinusoidal
  positions and tied output projection.

Not part of the package: the scripts and ``tests/benchmarks`` import it from here.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor, nn

from transformer_nmt.model import Transformer, TransformerConfig
from transformer_nmt.model.positional import SinusoidalPositionalEncoding

PAD, BOS, EOS, FIRST_WORD_ID = 0, 1, 2, 4
# small: conf/experiment/multi30k.yaml's shape (post-norm here: Marian has no other);
# base: the paper's (TransformerConfig's defaults). Sentence lengths in BPE tokens.
SIZES = {
    "small": dict(d_model=128, n_heads=4, n_layers=4, d_ff=256, vocab=8000, median_length=13),
    "base": dict(d_model=512, n_heads=8, n_layers=6, d_ff=2048, vocab=37000, median_length=24),
}


def our_config(size: str, **overrides) -> TransformerConfig:
    """Post-norm, dropout 0.1, one vocabulary shared by both embeddings and the output layer."""
    shape = {k: v for k, v in SIZES[size].items() if k not in ("vocab", "median_length")}
    vocab = SIZES[size]["vocab"]
    fields = dict(
        src_vocab_size=vocab,
        tgt_vocab_size=vocab,
        share_all_embeddings=True,
        norm="post",
        dropout=0.1,
        attention_dropout=0.0,
        pad_id=PAD,
        **shape,
    )
    return TransformerConfig(**{**fields, **overrides})


def token_bucket_batches(size: str, max_tokens: int, count: int, seed: int = 0) -> list[dict]:
    """``count`` batches of random ids, each as many sentences of similar length as fit in
    ``max_tokens`` padded tokens a side (a token-bucket sampler's), with log-normal lengths
    around the size's median; ``src_lengths``/``tgt_lengths`` hold the real lengths."""
    rng = np.random.default_rng(seed)
    vocab, median = SIZES[size]["vocab"], SIZES[size]["median_length"]
    source = np.exp(rng.normal(math.log(median), 0.5, 100_000))
    target = source * np.exp(rng.normal(0.05, 0.15, len(source)))
    src_len, tgt_len = (np.clip(np.rint(x), 2, 200).astype(np.int64) + 1 for x in (source, target))
    longer = np.maximum(src_len, tgt_len + 1)
    order = np.argsort(longer, kind="stable")
    buckets, start = [], 0
    while start < len(order):  # sorted: a bucket's longest sentence is its last
        end = start + 1
        while end < len(order) and (end - start + 1) * longer[order[end]] <= max_tokens:
            end += 1
        buckets.append(order[start:end])
        start = end
    chosen = rng.choice(len(buckets), size=min(count, len(buckets)), replace=False)
    return [_batch(buckets[i], src_len, tgt_len, vocab, rng) for i in chosen]


def _batch(indices, src_len, tgt_len, vocab: int, rng: np.random.Generator) -> dict:
    """src_ids (… EOS), tgt_in_ids (BOS …), labels (… EOS), padded; lengths with EOS/BOS."""
    s, t = src_len[indices], tgt_len[indices]
    src = np.full((len(indices), s.max()), PAD, dtype=np.int64)
    tgt = np.full((len(indices), t.max() + 1), PAD, dtype=np.int64)
    for row, (n_src, n_tgt) in enumerate(zip(s, t, strict=True)):
        src[row, : n_src - 1] = rng.integers(FIRST_WORD_ID, vocab, n_src - 1)
        src[row, n_src - 1] = EOS
        tgt[row, 0] = BOS
        tgt[row, 1:n_tgt] = rng.integers(FIRST_WORD_ID, vocab, n_tgt - 1)
        tgt[row, n_tgt] = EOS
    src_ids, tgt_in_ids, labels = (torch.from_numpy(a) for a in (src, tgt[:, :-1], tgt[:, 1:]))
    return dict(src_ids=src_ids, tgt_in_ids=tgt_in_ids, labels=labels, src_lengths=s, tgt_lengths=t)


# -- Hugging Face Marian -------------------------------------------------------------------------


def build_marian(config: TransformerConfig, bos_id: int = BOS, eos_id: int = EOS, attention="sdpa"):
    """A randomly initialised ``MarianMTModel`` of our shape, as ``export.py format=hf`` writes
    it (``attention``: HF's ``attn_implementation``)."""
    from transformers import MarianMTModel

    from transformer_nmt.export.huggingface import hf_model_config

    if not config.share_all_embeddings or config.norm != "post":
        raise ValueError("Marian is post-norm with one vocabulary: use norm='post', shared")
    hf_config = hf_model_config(config, bos_id, eos_id, config.pad_id)
    return MarianMTModel._from_config(hf_config, attn_implementation=attention)


def copy_into_marian(ours: Transformer, marian) -> None:
    """Our weights into ``marian`` (the export's mapping; its ``final_logits_bias`` zeroed)."""
    from transformer_nmt.export.hf_parameters import hf_state_dict

    with torch.no_grad():
        marian.load_state_dict(hf_state_dict(ours), strict=False)
        marian.final_logits_bias.zero_()
    if marian.lm_head.weight.data_ptr() != marian.model.shared.weight.data_ptr():
        raise RuntimeError("Marian's output projection is not tied to its embeddings")


def marian_logits(marian, src_ids: Tensor, tgt_in_ids: Tensor) -> Tensor:
    """Marian's logits for our batch (its masks from our padding)."""
    from transformer_nmt.export.huggingface import hf_logits

    return hf_logits(marian, src_ids, tgt_in_ids, PAD)


# -- torch.nn.Transformer ------------------------------------------------------------------------


class TorchTransformerNMT(nn.Module):
    """``torch.nn.Transformer`` (post-norm, batch-first) in √d_model-scaled shared embeddings,
    sinusoidal positions and a tied output projection. Its attention and FFN-inner dropouts are
    off, as in the paper and ours; it keeps the LayerNorm it puts after each stack."""

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
        )
        for layer in [*self.transformer.encoder.layers, *self.transformer.decoder.layers]:
            layer.dropout = nn.Identity()  # the dropout inside the FFN
            for attention in (layer.self_attn, getattr(layer, "multihead_attn", None)):
                if attention is not None:
                    attention.dropout = config.attention_dropout
        self.output = nn.Linear(config.d_model, config.tgt_vocab_size, bias=False)
        for parameter in self.parameters():
            if parameter.dim() > 1:
                nn.init.xavier_uniform_(parameter)
        self.output.weight = self.embedding.weight

    def embed(self, ids: Tensor) -> Tensor:
        return self.dropout(self.embedding(ids) * self.scale + self.positional(ids.size(1)))

    def forward(self, src_ids: Tensor, tgt_in_ids: Tensor) -> Tensor:
        src_padding, tgt_padding = src_ids == PAD, tgt_in_ids == PAD
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
        return self.output(hidden)
