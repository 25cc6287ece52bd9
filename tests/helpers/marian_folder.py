"""A small Marian (or Pegasus) Hugging Face folder built offline, laid out as opus-mt's: a
SentencePiece model per side, ``vocab.json`` with ``</s>`` = 0, ``<unk>`` = 1 and ``<pad>`` =
the last id (also the decoder start), a swish activation and a non-zero ``final_logits_bias``.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import torch

from .corpus import make_pairs
from .tiny_model import tiny_config

MARIAN_LANGUAGES = ("en", "de")
TINY = tiny_config()
# The tiny model's shape, in Marian's names; opus-mt's swish.
SMALL_MARIAN = dict(
    d_model=TINY.d_model,
    encoder_layers=TINY.n_encoder_layers,
    decoder_layers=TINY.n_decoder_layers,
    encoder_attention_heads=TINY.n_heads,
    decoder_attention_heads=TINY.n_heads,
    encoder_ffn_dim=TINY.d_ff,
    decoder_ffn_dim=TINY.d_ff,
    activation_function="swish",
    scale_embedding=True,
    max_position_embeddings=TINY.max_len,
)


def build_marian_folder(directory: Path, model_type: str = "marian", **config_overrides) -> Path:
    """Write the tokenizer and a randomly initialised ``model_type`` model (weights scaled so
    that logits are far from uniform) into ``directory``; returns it."""
    import sentencepiece as spm
    from transformers import (
        MarianConfig,
        MarianMTModel,
        MarianTokenizer,
        PegasusConfig,
        PegasusForConditionalGeneration,
    )

    directory.mkdir(parents=True, exist_ok=True)
    model_bytes = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([text for pair in make_pairs(300, seed=5) for text in pair]),
        model_writer=model_bytes,
        vocab_size=60,
        model_type="unigram",
        character_coverage=1.0,
        num_threads=1,
        minloglevel=2,
    )
    for name in ("source.spm", "target.spm"):
        (directory / name).write_bytes(model_bytes.getvalue())
    processor = spm.SentencePieceProcessor(model_proto=model_bytes.getvalue())
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    pieces = [p for p in pieces if p not in ("<unk>", "<s>", "</s>")]
    vocab = {"</s>": 0, "<unk>": 1, **{p: i + 2 for i, p in enumerate(pieces)}}
    vocab["<pad>"] = len(vocab)
    (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    source_lang, target_lang = MARIAN_LANGUAGES
    MarianTokenizer(
        str(directory / "source.spm"),
        str(directory / "target.spm"),
        str(directory / "vocab.json"),
        source_lang=source_lang,
        target_lang=target_lang,
    ).save_pretrained(directory)
    fields = dict(
        SMALL_MARIAN,
        vocab_size=len(vocab),
        pad_token_id=vocab["<pad>"],
        eos_token_id=0,
        decoder_start_token_id=vocab["<pad>"],
        forced_eos_token_id=0,
    )
    fields.update(config_overrides)
    torch.manual_seed(0)
    if model_type == "marian":
        model = MarianMTModel(MarianConfig(**fields))
    else:
        model = PegasusForConditionalGeneration(PegasusConfig(**fields))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "embed_positions" not in name and parameter.dim() > 1:
                parameter.mul_(10.0)
        model.final_logits_bias.normal_(0.0, 1.0)
    model.save_pretrained(directory)
    return directory
