"""A tiny corpus, BPE tokenizer and checkpoint in this project's format, built offline."""

from __future__ import annotations

import random
from pathlib import Path

import torch

from transformer_nmt.data.tokenizer import load_tokenizer, train_bpe
from transformer_nmt.model import Transformer, TransformerConfig

EN_DE = {
    "a": "ein", "man": "Mann", "woman": "Frau", "dog": "Hund", "plays": "spielt",
    "with": "mit", "the": "dem", "ball": "Ball", "in": "im", "park": "Park",
    "red": "roten", "small": "kleinen", "child": "Kind", "runs": "rennt", "and": "und",
}  # fmt: skip
MODEL_MAX_LEN = 24  # small, so that a long line gets truncated
# Multi30k's layout, as conf/data/multi30k.yaml names the files.
SPLIT_FILES = {"train": "train", "val": "val", "test": "test_2016_flickr"}


def make_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """Word-for-word English/German sentence pairs of 1 to 8 words."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        words = [rng.choice(list(EN_DE)) for _ in range(rng.randint(1, 8))]
        en = " ".join(words).capitalize() + "."
        de = " ".join(EN_DE[w] for w in words).capitalize() + "."
        pairs.append((en, de))
    return pairs


def write_corpus(directory: Path) -> dict[str, list[tuple[str, str]]]:
    """``{split}.en`` / ``{split}.de`` files; returns the pairs per logical split."""
    directory.mkdir(parents=True, exist_ok=True)
    splits = {"train": make_pairs(200, 1), "val": make_pairs(12, 2), "test": make_pairs(10, 3)}
    for split, pairs in splits.items():
        for side, lang in enumerate(("en", "de")):
            text = "".join(pair[side] + "\n" for pair in pairs)
            (directory / f"{SPLIT_FILES[split]}.{lang}").write_text(text, encoding="utf-8")
    return splits


def write_tokenizer(directory: Path, pairs: list[tuple[str, str]]) -> Path:
    tokenizer = train_bpe([text for pair in pairs for text in pair], vocab_size=120)
    tokenizer.save_pretrained(directory)
    return directory


def tiny_model(vocab_size: int, pad_id: int, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    config = TransformerConfig(
        src_vocab_size=vocab_size,
        tgt_vocab_size=vocab_size,
        share_all_embeddings=True,
        d_model=32,
        n_heads=4,
        n_encoder_layers=1,
        n_decoder_layers=1,
        d_ff=64,
        max_len=MODEL_MAX_LEN,
        pad_id=pad_id,
    )
    return Transformer(config).eval()


def checkpoint_dict(model: Transformer, tokenizer_path: Path, **overrides) -> dict:
    """What the training LightningModule saves: hyper_parameters + ``model.``-prefixed weights
    (+ optimizer and loop states, which averaging must drop).
    """
    tokenizer = load_tokenizer(str(tokenizer_path))
    hyper_parameters = {
        "model_config": model.config.to_dict(),
        "tokenizer_dir": str(tokenizer_path),
        "src_lang": "en",
        "tgt_lang": "de",
        "bos_id": tokenizer.bos_token_id,
        "eos_id": tokenizer.eos_token_id,
        "pad_id": tokenizer.pad_token_id,
        "learning_rate": 1e-3,
    }
    hyper_parameters.update(overrides)
    return {
        "epoch": 3,
        "global_step": 120,
        "pytorch-lightning_version": "2.6.6",
        "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
        "hyper_parameters": hyper_parameters,
        "optimizer_states": [{"state": {}, "param_groups": []}],
        "lr_schedulers": [{}],
        "loops": {},
    }


def write_checkpoint(path: Path, model: Transformer, tokenizer_path: Path, **overrides) -> Path:
    """Save :func:`checkpoint_dict`; ``overrides`` replace hyper-parameters."""
    torch.save(checkpoint_dict(model, tokenizer_path, **overrides), path)
    return path
