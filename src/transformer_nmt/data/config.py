"""What the data pipeline reads and how it batches: the schema of the ``data`` config group.

The defaults below are the only ones: the main job's WMT16 en→de from the Hugging Face Hub with a
joint BPE of 37000 types, as the paper. A YAML option (``conf/data/``) sets just what differs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

DEFAULT_CACHE_DIR = "~/.cache/transformer_nmt"


def default_cache_dir() -> str:
    """``$TRANSFORMER_NMT_CACHE`` if set, else ``~/.cache/transformer_nmt`` (not expanded)."""
    return os.environ.get("TRANSFORMER_NMT_CACHE") or DEFAULT_CACHE_DIR


@dataclass
class DataConfig:
    """A parallel corpus, its tokenizer and its batches.

    ``source`` says where the sentence pairs come from:

    - ``hub``: a translation dataset on the Hugging Face Hub (``hub_name``, ``hub_config``),
      read through ``datasets``; its splits are train / validation / test.
    - ``text_files``: a directory ``data_dir`` of line-aligned files ``{split}.{lang}`` or
      ``{split}.{lang}.gz``, one sentence per line (the Multi30k layout).
    - ``wmt16_files``: local jsonl or parquet files of rows ``{"translation": {lang: text}}``
      (the WMT16 schema), one entry of ``data_files`` per split.

    The logical splits are train / val / test; ``splits`` maps them to the source's own names
    (e.g. ``{test: test_2016_flickr}``), and ``train_split`` may slice (``train[:10%]``).
    """

    source: str = "hub"  # hub | text_files | wmt16_files
    hub_name: str = "wmt/wmt16"  # source=hub
    hub_config: str = "de-en"
    data_dir: str | None = None  # source=text_files
    data_files: dict[str, Any] | None = None  # source=wmt16_files: {train, validation, test}
    train_split: str = "train"
    splits: dict[str, str] | None = None  # logical train/val/test -> the source's split names
    src_lang: str = "en"
    tgt_lang: str = "de"
    tokenizer: str = "bpe"  # bpe: a joint BPE trained on train and cached | pretrained
    tokenizer_name: str | None = None  # tokenizer=pretrained: e.g. Helsinki-NLP/opus-mt-en-de
    vocab_size: int = 37000  # tokenizer=bpe: joint BPE types (paper: ~37000 for en-de)
    max_len: int = 256  # most tokens per side, BOS/EOS included
    max_tokens: int | None = 4096  # padded tokens per batch per device (sentences x longest)
    batch_size: int | None = None  # sentences per batch if max_tokens is null, else a cap
    num_workers: int = 2  # DataLoader worker processes
    seed: int = 0  # batch order; train.yaml ties it to the run's seed
    cache_dir: str | None = None  # tokenizers and tokenised splits; null: default_cache_dir()
