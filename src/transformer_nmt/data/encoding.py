"""Tokenising a split once into flat id arrays, caching them, and viewing them as examples.

A split is stored as ``{src,tgt}_tokens.npy`` (all ids, concatenated, without specials) and
``{src,tgt}_offsets.npy`` (where each sentence starts), memory-mapped when loaded so DDP ranks
share one copy. Specials, truncation to ``max_len`` and dropping of empty pairs are applied by
:class:`TranslationExamples` on top, so the cache does not depend on those options.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from torch.utils.data import Dataset

from transformer_nmt.atomic import build_directory_atomically
from transformer_nmt.data.fingerprints import fingerprint
from transformer_nmt.data.sources import ParallelSplit

log = logging.getLogger(__name__)

ENCODING_FORMAT_VERSION = 1
_CHUNK_SENTENCES = 20_000
_POOL_MIN_SENTENCES = 200_000  # below this a process pool costs more than it saves


def encode_texts(tokenizer, texts: Sequence[str], *, target: bool = False) -> list[list[int]]:
    """Token ids of ``texts`` without any special tokens (target side if ``target``)."""
    if not texts:
        return []
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:  # Rust, multi-threaded; identical ids to tokenizer(...)
        return [e.ids for e in backend.encode_batch_fast(list(texts), add_special_tokens=False)]
    key = "text_target" if target else "text"
    return tokenizer(**{key: list(texts)}, add_special_tokens=False)["input_ids"]


def encode_to_arrays(
    tokenizer, texts: Sequence[str], *, target: bool = False, num_proc: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Encode ``texts`` in chunks into (flat int32 token ids, int64 offsets of length n+1).

    With ``num_proc > 1`` the chunks are encoded in a process pool; this helps slow (Python)
    tokenizers on large corpora, fast tokenizers already run multi-threaded.
    """
    chunks = [texts[i : i + _CHUNK_SENTENCES] for i in range(0, len(texts), _CHUNK_SENTENCES)]
    if num_proc > 1 and len(chunks) > 1:
        with multiprocessing.get_context("fork").Pool(num_proc) as pool:
            parts = pool.starmap(_encode_chunk, [(tokenizer, c, target) for c in chunks])
    else:
        parts = [_encode_chunk(tokenizer, c, target) for c in chunks]
    tokens = np.concatenate([p[0] for p in parts] or [np.zeros(0, np.int32)])
    lengths = np.concatenate([p[1] for p in parts] or [np.zeros(0, np.int64)])
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return tokens, offsets


def _encode_chunk(tokenizer, texts: Sequence[str], target: bool) -> tuple[np.ndarray, np.ndarray]:
    ids = encode_texts(tokenizer, texts, target=target)
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int(lengths.sum()))
    return flat, lengths


@dataclass(frozen=True)
class EncodedSplit:
    """The token ids of every pair of a split, as flat arrays plus offsets."""

    src_tokens: np.ndarray
    src_offsets: np.ndarray
    tgt_tokens: np.ndarray
    tgt_offsets: np.ndarray

    _FILES = ("src_tokens", "src_offsets", "tgt_tokens", "tgt_offsets")

    def __len__(self) -> int:
        return len(self.src_offsets) - 1

    def save(self, directory: Path) -> None:
        for name in self._FILES:
            np.save(directory / f"{name}.npy", getattr(self, name))

    @classmethod
    def load(cls, directory: Path) -> EncodedSplit:
        return cls(*(np.load(directory / f"{name}.npy", mmap_mode="r") for name in cls._FILES))


def encoded_cache_entry(cache_dir: Path, split_fingerprint: str, tokenizer_key: str) -> Path:
    """Where the encoding of one split by one tokenizer is cached."""
    key = fingerprint("encoded", ENCODING_FORMAT_VERSION, split_fingerprint, tokenizer_key)
    return cache_dir / "encoded" / key


def load_or_encode(
    entry: Path, split: ParallelSplit, tokenizer, num_proc: int = 1
) -> tuple[EncodedSplit, bool]:
    """Load the cached encoding at ``entry``, encoding ``split`` and publishing it first if needed.

    Returns the encoded split and whether it was encoded by this call.
    """
    encoded_now = False

    def build(tmp_dir: Path) -> None:
        nonlocal encoded_now
        src, tgt = split.read()
        slow_tokenizer = getattr(tokenizer, "backend_tokenizer", None) is None
        procs = num_proc if slow_tokenizer and len(src) >= _POOL_MIN_SENTENCES else 1
        src_arrays = encode_to_arrays(tokenizer, src, num_proc=procs)
        tgt_arrays = encode_to_arrays(tokenizer, tgt, target=True, num_proc=procs)
        EncodedSplit(*src_arrays, *tgt_arrays).save(tmp_dir)
        encoded_now = True
        log.info("encoded %d pairs of %s", len(src), split.description)

    build_directory_atomically(entry, build, {"split": split.description})
    return EncodedSplit.load(entry), encoded_now


@dataclass(frozen=True)
class SplitStats:
    """What happened to a split's pairs on the way to examples."""

    pairs: int
    examples: int
    dropped_empty: int
    kept_empty: int
    truncated_src: int
    truncated_tgt: int

    def describe(self, split: str, max_len: int) -> str:
        parts = [f"{split}: {self.examples} examples from {self.pairs} pairs"]
        if self.dropped_empty:
            parts.append(f"dropped {self.dropped_empty} pairs with an empty side")
        if self.kept_empty:
            parts.append(f"kept {self.kept_empty} pairs with an empty side")
        parts.append(
            f"truncated {self.truncated_src} sources and {self.truncated_tgt} targets "
            f"to max_len={max_len}"
        )
        return "; ".join(parts)


class TranslationExamples(Dataset):
    """Examples of one split: ``(example_id, source ids, target ids)`` without specials.

    Sides are truncated to ``max_len - 1`` ids so that with EOS (source), BOS + ids (decoder
    input) or ids + EOS (labels) every side holds at most ``max_len`` tokens. ``example_id`` is
    the pair's position in the split (and in ``raw_pairs``). With ``drop_empty`` pairs with an
    empty side are left out.
    """

    def __init__(self, encoded: EncodedSplit, *, max_len: int, drop_empty: bool) -> None:
        if max_len < 2:
            raise ValueError(f"max_len must leave room for a token and a special, got {max_len}")
        self.encoded = encoded
        self.body_limit = max_len - 1
        src_len = np.diff(encoded.src_offsets)
        tgt_len = np.diff(encoded.tgt_offsets)
        empty = (src_len == 0) | (tgt_len == 0)
        self.example_ids = np.flatnonzero(~empty) if drop_empty else np.arange(len(encoded))
        src_len, tgt_len = src_len[self.example_ids], tgt_len[self.example_ids]
        # lengths as batched: source + EOS, and BOS + target (= target + EOS)
        self.src_lengths = np.minimum(src_len, self.body_limit) + 1
        self.tgt_lengths = np.minimum(tgt_len, self.body_limit) + 1
        n_empty = int(empty.sum())
        self.stats = SplitStats(
            pairs=len(encoded),
            examples=len(self.example_ids),
            dropped_empty=n_empty if drop_empty else 0,
            kept_empty=0 if drop_empty else n_empty,
            truncated_src=int((src_len > self.body_limit).sum()),
            truncated_tgt=int((tgt_len > self.body_limit).sum()),
        )

    @property
    def lengths(self) -> np.ndarray:
        """Per example, the longer side as batched; the token budget counts this per sentence."""
        return np.maximum(self.src_lengths, self.tgt_lengths)

    def __len__(self) -> int:
        return len(self.example_ids)

    def __getitem__(self, index: int) -> tuple[int, np.ndarray, np.ndarray]:
        pair = int(self.example_ids[index])
        enc = self.encoded
        src_start, tgt_start = enc.src_offsets[pair], enc.tgt_offsets[pair]
        src_end = min(enc.src_offsets[pair + 1], src_start + self.body_limit)
        tgt_end = min(enc.tgt_offsets[pair + 1], tgt_start + self.body_limit)
        return pair, enc.src_tokens[src_start:src_end], enc.tgt_tokens[tgt_start:tgt_end]
