from dataclasses import dataclass
from pathlib import Path

import pytest

from transformer_nmt.data.tokenizer import load_tokenizer
from transformer_nmt.model import Transformer

from .tiny_checkpoint import tiny_model, write_checkpoint, write_corpus, write_tokenizer


@dataclass
class Workspace:
    """A corpus directory (Multi30k layout), a tokenizer and a checkpoint of a tiny model."""

    corpus_dir: Path
    pairs: dict
    tokenizer_dir: Path
    tokenizer: object
    model: Transformer
    ckpt_path: Path


@pytest.fixture(scope="session")
def workspace(tmp_path_factory) -> Workspace:
    root = tmp_path_factory.mktemp("evaluation")
    pairs = write_corpus(root / "corpus")
    tokenizer_dir = write_tokenizer(root / "tokenizer", pairs["train"])
    tokenizer = load_tokenizer(str(tokenizer_dir))
    model = tiny_model(len(tokenizer), tokenizer.pad_token_id)
    ckpt_path = write_checkpoint(root / "tiny.ckpt", model, tokenizer_dir)
    return Workspace(root / "corpus", pairs, tokenizer_dir, tokenizer, model, ckpt_path)
