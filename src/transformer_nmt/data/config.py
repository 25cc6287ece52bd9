"""What the data pipeline reads and how it batches: the schema of the ``data`` config group.

The defaults below are the only ones: the main job's WMT16 en→de from the Hugging Face Hub with a
joint BPE of 37000 types, as the paper. A YAML option (``conf/data/``) sets just what differs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
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
    - ``multi30k``: Multi30k task 1 (en, de), downloaded into the cache on first use and checked
      against pinned sha256 sums, or read from ``data_dir`` if set; its splits are train / val /
      test_2016_flickr (the default test), test_2017_flickr, test_2017_mscoco, test_2018_flickr.
    - ``text_files``: a directory ``data_dir`` of line-aligned files ``{split}.{lang}`` or
      ``{split}.{lang}.gz``, one sentence per line (the Multi30k layout).
    - ``wmt16_files``: local jsonl or parquet files of rows ``{"translation": {lang: text}}``
      (the WMT16 schema), one entry of ``data_files`` per split.

    The logical splits are train / val / test; ``splits`` maps them to the source's own names
    (e.g. ``{test: test_2017_flickr}``), and ``train_split`` may slice (``train[:10%]``).

    A side longer than ``max_len`` tokens (BOS/EOS included) is a problem only in training: with
    ``overlong=drop`` such training pairs are left out (as fairseq does), with ``truncate`` cut
    to ``max_len``. Validation and test keep every pair, so that they match their references:
    their over-long sides are truncated for the loss, and BLEU decodes the truncated source
    against the full reference (both counted in the log).
    """

    source: str = "hub"  # hub | multi30k | text_files | wmt16_files
    hub_name: str = "wmt/wmt16"  # source=hub
    hub_config: str = "de-en"
    data_dir: str | None = None  # source=text_files; source=multi30k: null downloads it
    data_files: dict[str, Any] | None = None  # source=wmt16_files: {train, validation, test}
    train_split: str = "train"
    # logical split -> the source's name for it; null: the source's own (val: validation or val;
    # test: test, Multi30k test_2016_flickr). train_split names (and may slice) the training split
    splits: dict[str, str | None] = field(default_factory=lambda: {"val": None, "test": None})
    src_lang: str = "en"
    tgt_lang: str = "de"
    tokenizer: str = "bpe"  # bpe: a joint BPE trained on train and cached | pretrained
    tokenizer_name: str | None = None  # tokenizer=pretrained: e.g. Helsinki-NLP/opus-mt-en-de
    vocab_size: int = 37000  # tokenizer=bpe: joint BPE types (paper: ~37000 for en-de)
    bpe_sample_pairs: int | None = 1_000_000  # BPE learnt from a random sample this big; null: all
    max_len: int = 256  # most tokens per side, BOS/EOS included
    overlong: str = "drop"  # training pairs with a side over max_len: drop | truncate
    min_train_pairs: int = 100  # fewer usable training pairs is an error (a wrong or empty file)
    max_tokens: int | None = 4096  # padded tokens per batch per device (sentences x longest)
    batch_size: int | None = None  # sentences per batch if max_tokens is null, else a cap
    num_workers: int = 2  # DataLoader worker processes
    seed: int = 0  # batch order; train.yaml ties it to the run's seed
    cache_dir: str | None = None  # tokenizers and tokenised splits; null: default_cache_dir()
