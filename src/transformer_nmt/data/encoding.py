"""Tokenising a split once into flat id arrays, caching them, and viewing them as examples.

A split is stored as ``{src,tgt}_tokens.npy`` (all ids, concatenated, without specials; uint16
when the vocabulary fits, else int32) and ``{src,tgt}_offsets.npy`` (where each sentence starts),
memory-mapped when loaded so that DDP ranks and DataLoader workers share one copy (the kernel's
page cache), each process unmapping the pages it has read after every batch so that what it
maps does not grow with the corpus. The split is
encoded a chunk at a time straight into those files, so memory does not grow with the corpus.
Specials, the ``max_len`` limit (drop or truncate) and dropping of empty pairs are applied by
:class:`TranslationExamples` on top, so the cache does not depend on those options.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import mmap
import multiprocessing
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from torch.utils.data import Dataset

from transformer_nmt.atomic import build_directory_atomically
from transformer_nmt.data.fingerprints import fingerprint
from transformer_nmt.data.sources import Chunk, ParallelSplit
from transformer_nmt.data.tokenizer import splits_at_spaces
from transformer_nmt.data.word_table import WordTable

log = logging.getLogger(__name__)

ENCODING_FORMAT_VERSION = 2  # 2: written in chunks, uint16 ids when the vocabulary fits
OVERLONG_POLICIES = ("drop", "truncate")
_POOL_TOKENIZER = None  # the tokenizer of the encoding pool's forked workers


def encode_texts(tokenizer, texts: Sequence[str], *, target: bool = False) -> list[list[int]]:
    """Token ids of ``texts`` without any special tokens (target side if ``target``)."""
    if not texts:
        return []
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:  # Rust, multi-threaded; identical ids to tokenizer(...)
        return [e.ids for e in backend.encode_batch_fast(list(texts), add_special_tokens=False)]
    key = "text_target" if target else "text"
    return tokenizer(**{key: list(texts)}, add_special_tokens=False)["input_ids"]


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest id type of the cache that holds ``vocab_size`` ids."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.int32)


class NpyWriter:
    """A 1-D ``.npy`` file written a block at a time (``with NpyWriter(...) as w: w.append(a)``);
    the header's length is set when the block ends without an error."""

    def __init__(self, path: Path, dtype: np.dtype) -> None:
        self.path, self.dtype, self.length = path, np.dtype(dtype), 0
        self.handle = open(path, "wb")  # noqa: SIM115 - closed by __exit__
        self._write_header()
        self.header_bytes = self.handle.tell()

    def __enter__(self) -> NpyWriter:
        return self

    def append(self, array: np.ndarray) -> None:
        self.handle.write(memoryview(np.ascontiguousarray(array, dtype=self.dtype)))
        self.length += len(array)

    def __exit__(self, error_type, *_) -> None:
        with self.handle:
            if error_type is None:
                self.handle.seek(0)
                self._write_header()
                if self.handle.tell() != self.header_bytes:  # only past 10^20 ids
                    raise RuntimeError(f"the .npy header of {self.path} changed size")

    def _write_header(self) -> None:
        header = {
            "descr": np.lib.format.dtype_to_descr(self.dtype),
            "fortran_order": False,
            "shape": (self.length,),
        }
        np.lib.format.write_array_header_1_0(self.handle, header)


def encode_split(split: ParallelSplit, tokenizer, directory: Path, num_proc: int = 1) -> dict:
    """Encode ``split`` chunk by chunk into the four arrays of :class:`EncodedSplit` in
    ``directory``; returns what it did (``pairs``, ``encode_s``, ``write_s``).

    This package's BPE encodes each distinct word once (:class:`WordTable`); with
    ``num_proc > 1`` a slow (Python) tokenizer encodes ``num_proc`` chunks at a time in a
    process pool; other fast tokenizers are multi-threaded already.
    """
    started = time.perf_counter()
    dtype = token_dtype(len(tokenizer))
    limit = np.iinfo(dtype).max
    writing = 0.0
    lengths: dict[str, list[np.ndarray]] = {"src": [], "tgt": []}
    with contextlib.ExitStack() as files:
        writers = {
            side: files.enter_context(NpyWriter(directory / f"{side}_tokens.npy", dtype))
            for side in lengths
        }
        for encoded_chunk in _encoded_chunks(tokenizer, split.chunks(), num_proc):
            for side, (ids, chunk_lengths) in zip(lengths, encoded_chunk, strict=True):
                if ids.size and ids.max() > limit:
                    raise ValueError(f"token id {ids.max()} does not fit the cache's {dtype}")
                tick = time.perf_counter()
                writers[side].append(ids)
                writing += time.perf_counter() - tick
                lengths[side].append(chunk_lengths)
        tick = time.perf_counter()
    for side, side_lengths in lengths.items():
        counts = np.concatenate(side_lengths or [np.zeros(0, np.int64)])
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        np.save(directory / f"{side}_offsets.npy", offsets)
    writing += time.perf_counter() - tick
    pairs = len(offsets) - 1
    return {"pairs": pairs, "encode_s": time.perf_counter() - started, "write_s": writing}


def _encoded_chunks(tokenizer, chunks: Iterable[Chunk], num_proc: int) -> Iterator[tuple]:
    """((source ids, lengths), (target ids, lengths)) per chunk, in order."""
    if splits_at_spaces(tokenizer):  # this package's BPE: one distinct word at a time
        words = WordTable(tokenizer)
        for src, tgt in chunks:
            yield words.encode(src), words.encode(tgt)
        return
    chunks = iter(chunks)
    slow = getattr(tokenizer, "backend_tokenizer", None) is None
    head = list(itertools.islice(chunks, 2))
    if num_proc <= 1 or not slow or len(head) < 2:
        for src, tgt in itertools.chain(head, chunks):
            yield _encode_chunk(tokenizer, src, tgt)
        return
    global _POOL_TOKENIZER
    _POOL_TOKENIZER = tokenizer  # inherited by the forked workers, not pickled per task
    try:
        with multiprocessing.get_context("fork").Pool(num_proc) as pool:
            chunks = itertools.chain(head, chunks)
            while window := list(itertools.islice(chunks, num_proc)):
                yield from pool.starmap(_encode_chunk_in_pool, window)
    finally:
        _POOL_TOKENIZER = None


def _encode_chunk_in_pool(src: list[str], tgt: list[str]) -> tuple:
    return _encode_chunk(_POOL_TOKENIZER, src, tgt)


def _encode_chunk(tokenizer, src: list[str], tgt: list[str]) -> tuple:
    return _flat(encode_texts(tokenizer, src)), _flat(encode_texts(tokenizer, tgt, target=True))


def _flat(ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(all ids concatenated, int64 length of each sentence)."""
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum()))
    return flat, lengths


@dataclass(frozen=True)
class EncodedSplit:
    """The token ids of every pair of a split, as flat arrays plus offsets; from :meth:`load`,
    read-only arrays over memory maps of the cached files."""

    src_tokens: np.ndarray
    src_offsets: np.ndarray
    tgt_tokens: np.ndarray
    tgt_offsets: np.ndarray
    directory: Path | None = None  # the cache entry the arrays map, if loaded from one
    maps: tuple[mmap.mmap, ...] = ()

    _FILES = ("src_tokens", "src_offsets", "tgt_tokens", "tgt_offsets")

    def __len__(self) -> int:
        return len(self.src_offsets) - 1

    @classmethod
    def load(cls, directory: Path) -> EncodedSplit:
        arrays, maps = zip(
            *(_map_npy(directory / f"{name}.npy") for name in cls._FILES), strict=True
        )
        return cls(*arrays, directory=directory, maps=maps)

    def __reduce__(self):
        """A loaded split pickles as its directory (a spawned worker maps the files itself)."""
        if self.directory is None:
            return super().__reduce__()
        return (EncodedSplit.load, (self.directory,))

    def unmap_read_pages(self) -> None:
        """Drop this process's mappings of the file pages it has read; the pages stay in the
        kernel's page cache and are mapped again on the next read.

        Each read maps more than the bytes asked for (the kernel maps the cached pages around
        them too), so a DataLoader worker reading random sentences of a large corpus would
        otherwise map ever more of the files, and be charged for them, batch after batch.
        """
        for mapped in self.maps:
            mapped.madvise(mmap.MADV_DONTNEED)


def _map_npy(path: Path) -> tuple[np.ndarray, mmap.mmap]:
    """A read-only array over the ``.npy`` file at ``path``, and the memory map it reads."""
    with open(path, "rb") as handle:
        version = np.lib.format.read_magic(handle)
        if version == (1, 0):
            shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(handle)
        else:
            shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(handle)
        offset = handle.tell()
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    array = np.frombuffer(mapped, dtype=dtype, count=math.prod(shape), offset=offset)
    return array.reshape(shape, order="F" if fortran_order else "C"), mapped


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
        done = encode_split(split, tokenizer, tmp_dir, num_proc)
        encoded_now = True
        log.info(
            "encoded %d pairs of %s in %.1f s (writing %.1f s)",
            done["pairs"],
            split.description,
            done["encode_s"],
            done["write_s"],
        )

    build_directory_atomically(entry, build, {"split": split.description})
    return EncodedSplit.load(entry), encoded_now


@dataclass(frozen=True)
class ExampleBatch:
    """Examples as flat arrays: pair ids, and each side's ids concatenated with their lengths."""

    ids: np.ndarray
    src_tokens: np.ndarray
    src_lengths: np.ndarray
    tgt_tokens: np.ndarray
    tgt_lengths: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)


def _gather(
    tokens: np.ndarray, offsets: np.ndarray, pairs: np.ndarray, limit: int
) -> tuple[np.ndarray, np.ndarray]:
    """The first ``limit`` ids of each sentence in ``pairs``, concatenated, and their counts."""
    starts = offsets[pairs]
    lengths = np.minimum(offsets[pairs + 1] - starts, limit)
    ends = np.cumsum(lengths)
    # position of every gathered id: its sentence's start + its place within the sentence
    positions = np.arange(ends[-1] if len(ends) else 0) + np.repeat(
        starts - (ends - lengths), lengths
    )
    return np.asarray(tokens[positions]), lengths


@dataclass(frozen=True)
class SplitStats:
    """What happened to a split's pairs on the way to examples."""

    pairs: int
    examples: int
    dropped_empty: int
    kept_empty: int
    dropped_overlong: int
    truncated_src: int
    truncated_tgt: int

    def describe(self, split: str, max_len: int) -> str:
        parts = [f"{split}: {self.examples} examples from {self.pairs} pairs"]
        if self.dropped_empty:
            parts.append(f"dropped {self.dropped_empty} pairs with an empty side")
        if self.kept_empty:
            parts.append(f"kept {self.kept_empty} pairs with an empty side")
        if self.dropped_overlong:
            parts.append(
                f"dropped {self.dropped_overlong} pairs with a side longer than max_len={max_len} "
                f"tokens (data.overlong=truncate keeps them, truncated)"
            )
        if self.truncated_src or self.truncated_tgt or not self.dropped_overlong:
            parts.append(
                f"truncated {self.truncated_src} sources and {self.truncated_tgt} targets to "
                f"max_len={max_len}"
            )
        return "; ".join(parts)


class TranslationExamples(Dataset):
    """Examples of one split: ``(example_id, source ids, target ids)`` without specials.

    Every side holds at most ``max_len - 1`` ids so that with EOS (source), BOS + ids (decoder
    input) or ids + EOS (labels) it is at most ``max_len`` tokens long: with ``drop_overlong``
    pairs with a longer side are left out, otherwise such sides are truncated. With
    ``drop_empty`` pairs with an empty side are left out. ``example_id`` is the pair's position
    in the split (and in ``raw_pairs``). Everything it holds is a numpy array (or a memory map),
    so forked DataLoader workers share it instead of copying Python objects.
    """

    def __init__(
        self, encoded: EncodedSplit, *, max_len: int, drop_empty: bool, drop_overlong: bool
    ) -> None:
        if max_len < 2:
            raise ValueError(f"max_len must leave room for a token and a special, got {max_len}")
        self.encoded = encoded
        self.body_limit = max_len - 1
        src_len = np.diff(encoded.src_offsets)
        tgt_len = np.diff(encoded.tgt_offsets)
        empty = (src_len == 0) | (tgt_len == 0)
        overlong = (src_len > self.body_limit) | (tgt_len > self.body_limit)
        keep = ~empty if drop_empty else np.ones(len(encoded), dtype=bool)
        dropped_overlong = int((keep & overlong).sum()) if drop_overlong else 0
        if drop_overlong:
            keep &= ~overlong
        # Every rank holds three 4-byte arrays per example for the whole run: the ids, the
        # source lengths (the batches' tie-break) and the longer side (what batches are cut by)
        self.example_ids = np.flatnonzero(keep).astype(_index_dtype(len(encoded)))
        src_len, tgt_len = src_len[self.example_ids], tgt_len[self.example_ids]
        # lengths as batched: source + EOS, and BOS + target (= target + EOS)
        self.src_lengths = self._as_batched(src_len)
        self.lengths = np.maximum(self.src_lengths, self._as_batched(tgt_len))
        encoded.unmap_read_pages()  # the offsets, read whole just now
        n_empty = int(empty.sum())
        self.stats = SplitStats(
            pairs=len(encoded),
            examples=len(self.example_ids),
            dropped_empty=n_empty if drop_empty else 0,
            kept_empty=0 if drop_empty else n_empty,
            dropped_overlong=dropped_overlong,
            truncated_src=int((src_len > self.body_limit).sum()),
            truncated_tgt=int((tgt_len > self.body_limit).sum()),
        )

    @property
    def tgt_lengths(self) -> np.ndarray:
        """Per example, the target as batched (BOS + ids); read from the offsets on each call.

        ``lengths``, the longer side, is what batching needs, so only it and ``src_lengths`` are
        held; this one is for reports.
        """
        tgt_len = np.diff(self.encoded.tgt_offsets)[self.example_ids]
        self.encoded.unmap_read_pages()
        return self._as_batched(tgt_len)

    def _as_batched(self, body_lengths: np.ndarray) -> np.ndarray:
        """Lengths of sides as batched: at most ``body_limit`` ids plus one special."""
        return (np.minimum(body_lengths, self.body_limit) + 1).astype(np.int32)

    def __len__(self) -> int:
        return len(self.example_ids)

    def __getitems__(self, indices: Sequence[int]) -> ExampleBatch:
        """Several examples at once as flat arrays (what a DataLoader fetches per batch)."""
        pairs = self.example_ids[np.asarray(indices, dtype=np.int64)]
        enc = self.encoded
        src_tokens, src_lengths = _gather(enc.src_tokens, enc.src_offsets, pairs, self.body_limit)
        tgt_tokens, tgt_lengths = _gather(enc.tgt_tokens, enc.tgt_offsets, pairs, self.body_limit)
        enc.unmap_read_pages()  # the gathered ids are copies
        return ExampleBatch(pairs, src_tokens, src_lengths, tgt_tokens, tgt_lengths)

    def __getitem__(self, index: int) -> tuple[int, np.ndarray, np.ndarray]:
        pair = int(self.example_ids[index])
        enc = self.encoded
        src_start, tgt_start = enc.src_offsets[pair], enc.tgt_offsets[pair]
        src_end = min(enc.src_offsets[pair + 1], src_start + self.body_limit)
        tgt_end = min(enc.tgt_offsets[pair + 1], tgt_start + self.body_limit)
        return pair, enc.src_tokens[src_start:src_end], enc.tgt_tokens[tgt_start:tgt_end]


def _index_dtype(count: int) -> type[np.integer]:
    """The narrowest of int32 and int64 that indexes ``count`` items."""
    return np.int32 if count < 2**31 else np.int64
