"""A tiny corpus, BPE tokenizer and checkpoint in this project's format, built offline."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from transformer_nmt.data.tokenizer import (
    load_tokenizer,
    tokenizer_files,
    tokenizer_identity,
    train_bpe,
)
from transformer_nmt.model import Transformer

from .corpus import MULTI30K_FILE_NAMES, Pairs, make_pairs, write_corpus
from .tiny_model import tiny_config

MODEL_MAX_LEN = 24  # small, so that a long line gets truncated
TOKENIZER_VOCAB_SIZE = 120

# The checkpoint contract that docs/design.md states for plain torch.load readers.
CONTRACT_KEYS = frozenset(
    ("model_config", "tokenizer_dir", "src_lang", "tgt_lang", "bos_id", "eos_id", "pad_id")
)


def write_tokenizer(directory: Path, pairs: Pairs) -> Path:
    """A BPE of TOKENIZER_VOCAB_SIZE types trained on both sides of ``pairs``, saved."""
    tokenizer = train_bpe([text for pair in pairs for text in pair], TOKENIZER_VOCAB_SIZE)
    tokenizer.save_pretrained(directory)
    return directory


def checkpoint_model(vocab_size: int, pad_id: int, seed: int = 0) -> Transformer:
    """An untrained one-layer tiny model over one shared vocabulary, in eval mode."""
    torch.manual_seed(seed)
    config = tiny_config(
        src_vocab_size=vocab_size,
        tgt_vocab_size=vocab_size,
        share_all_embeddings=True,
        n_encoder_layers=1,
        n_decoder_layers=1,
        max_len=MODEL_MAX_LEN,
        pad_id=pad_id,
    )
    return Transformer(config).eval()


def checkpoint_dict(
    model: Transformer, tokenizer_path: Path, *, as_trained: bool = False, **overrides
) -> dict:
    """What the training LightningModule saves: hyper_parameters + ``model.``-prefixed weights
    (+ optimizer and loop states, which averaging must drop). ``as_trained`` adds what train.py
    adds besides: the tokenizer's identity and its files.
    """
    tokenizer = load_tokenizer(str(tokenizer_path))
    if as_trained:
        overrides = {"tokenizer_identity": tokenizer_identity(tokenizer), **overrides}
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
    checkpoint = {
        "epoch": 3,
        "global_step": 120,
        "pytorch-lightning_version": "2.6.6",
        "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
        "hyper_parameters": hyper_parameters,
        "optimizer_states": [{"state": {}, "param_groups": []}],
        "lr_schedulers": [{}],
        "loops": {},
    }
    if as_trained:
        checkpoint["tokenizer_files"] = tokenizer_files(str(tokenizer_path))
    return checkpoint


def write_checkpoint(
    path: Path, model: Transformer, tokenizer_path: Path, *, as_trained: bool = False, **overrides
) -> Path:
    """Save :func:`checkpoint_dict`; ``overrides`` replace hyper-parameters."""
    torch.save(checkpoint_dict(model, tokenizer_path, as_trained=as_trained, **overrides), path)
    return path


def write_other_tokenizer(directory: Path) -> Path:
    """A BPE of the same size as :func:`write_tokenizer`'s, trained on other (lowercase) pairs:
    other token ids for the same vocabulary size."""
    return write_tokenizer(directory, make_pairs(200, seed=1, capitalised=False))


@dataclass
class Workspace:
    """A corpus directory (Multi30k layout), a tokenizer and a checkpoint of a tiny model."""

    corpus_dir: Path
    pairs: dict[str, Pairs]
    tokenizer_dir: Path
    tokenizer: object
    model: Transformer
    ckpt_path: Path


def build_workspace(root: Path) -> Workspace:
    """Capitalised pairs of 1 to 8 words (train 200, val 12, test 10) under Multi30k's file
    names, the BPE trained on train, and an untrained model's checkpoint: no training at all."""
    pairs = {
        "train": make_pairs(200, seed=1),
        "val": make_pairs(12, seed=2),
        "test": make_pairs(10, seed=3),
    }
    corpus_dir = write_corpus(root / "corpus", pairs, file_names=MULTI30K_FILE_NAMES)
    tokenizer_dir = write_tokenizer(root / "tokenizer", pairs["train"])
    tokenizer = load_tokenizer(str(tokenizer_dir))
    model = checkpoint_model(len(tokenizer), tokenizer.pad_token_id)
    ckpt_path = write_checkpoint(root / "tiny.ckpt", model, tokenizer_dir)
    return Workspace(corpus_dir, pairs, tokenizer_dir, tokenizer, model, ckpt_path)
