"""Encoding a large corpus one distinct word at a time.

The joint BPE of this package splits text at every space before anything else (``Metaspace``),
and its merges never cross a split, so a sentence's ids are its space-separated words' ids in
order. A corpus of millions of sentences holds far fewer distinct words: :class:`WordTable`
encodes each distinct word once with the Rust tokenizer and assembles every sentence from the
table with array operations, several times faster than encoding whole sentences.

Exactness does not rest on that argument alone: every new word is also encoded between two
other words, and a word whose ids differ there (one that NFKC turns into something that starts
with a space, say) is marked, and the sentences holding it are encoded whole.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from transformer_nmt.data.ragged import ragged_positions

_CONTEXT = "a"  # the word placed on both sides of a new word to check it
_MAX_WORDS = 2_000_000  # the table starts afresh beyond this, which bounds its memory
_UNSAFE = -1


class WordTable:
    """Token ids of distinct space-separated words, for a tokenizer that splits at every space
    (check with :func:`~transformer_nmt.data.tokenizer.splits_at_spaces`)."""

    def __init__(self, tokenizer, max_words: int = _MAX_WORDS) -> None:
        self.backend = tokenizer.backend_tokenizer
        self.max_words = max_words
        self._context_ids = self._encode([_CONTEXT])[0]
        self._clear()

    def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(every sentence's ids concatenated, int64 length of each), as the tokenizer gives
        them without special tokens."""
        import pyarrow as pa
        import pyarrow.compute as pc

        # split and deduplicate the words in Arrow (C++): Python sees each distinct word once
        text = pa.array(texts, type=pa.string())
        words = pc.split_pattern(text, pattern=" ")
        counts = pc.list_value_length(words).to_numpy().astype(np.int64)
        empty = pc.equal(pc.utf8_length(text), 0).to_numpy(zero_copy_only=False)
        flat = pc.list_flatten(words)
        if empty.any():  # an empty sentence has no words, not one empty word
            flat = flat.filter(pa.array(np.repeat(~empty, counts)))
            counts[empty] = 0
        distinct = pc.dictionary_encode(flat)
        unique_words = distinct.dictionary.to_pylist()
        self._add_missing(unique_words)
        unique_rows = np.fromiter(map(self.rows.__getitem__, unique_words), np.int64)
        rows = unique_rows[distinct.indices.to_numpy()]
        sentence_of_word = np.repeat(np.arange(len(texts)), counts)
        whole = np.zeros(len(texts), dtype=bool)
        whole[sentence_of_word[rows == _UNSAFE]] = True
        by_words = ~whole[sentence_of_word]
        rows = rows[by_words]
        word_lengths = self._lengths[rows]
        lengths = np.bincount(
            sentence_of_word[by_words], weights=word_lengths, minlength=len(texts)
        ).astype(np.int64)
        word_ids = self._ids[ragged_positions(self._starts[rows], word_lengths)]
        if not whole.any():
            return word_ids, lengths
        # sentences with a marked word: encoded whole, then everything put in sentence order
        whole_at = np.flatnonzero(whole)
        whole_encoded = self._encode([texts[i] for i in whole_at])
        lengths[whole_at] = [len(ids) for ids in whole_encoded]
        starts = np.cumsum(lengths) - lengths
        out = np.empty(int(lengths.sum()), dtype=np.int64)
        by_words_at = np.flatnonzero(~whole)
        out[ragged_positions(starts[by_words_at], lengths[by_words_at])] = word_ids
        out[ragged_positions(starts[whole_at], lengths[whole_at])] = np.fromiter(
            itertools.chain.from_iterable(whole_encoded), np.int64
        )
        return out, lengths

    def _add_missing(self, words: list[str]) -> None:
        """Encode the distinct ``words`` the table does not hold yet."""
        new = [w for w in words if w not in self.rows]
        if not new:
            return
        if len(self.rows) + len(new) > self.max_words:
            self._clear()
            new = words
        alone = self._encode(new)
        in_context = self._encode([f"{_CONTEXT} {w} {_CONTEXT}" for w in new])
        context, first = self._context_ids, len(self._lengths)
        lengths, ids = np.zeros(len(new), dtype=np.int64), []
        for row, (word, word_ids, ids_in_context) in enumerate(
            zip(new, alone, in_context, strict=True)
        ):
            if word == "":  # two spaces in a row: a lone "▁" piece
                word_ids = ids_in_context[len(context) : -len(context)]
            if ids_in_context == [*context, *word_ids, *context]:
                self.rows[word] = first + row
                lengths[row] = len(word_ids)
                ids.extend(word_ids)
            else:
                self.rows[word] = _UNSAFE
        self._lengths = np.concatenate([self._lengths, lengths])
        self._starts = np.cumsum(self._lengths) - self._lengths
        self._ids = np.concatenate([self._ids, np.asarray(ids, dtype=np.int64)])

    def _encode(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.backend.encode_batch_fast(texts, add_special_tokens=False)]

    def _clear(self) -> None:
        self.rows: dict[str, int] = {}
        self._lengths = np.zeros(0, dtype=np.int64)
        self._starts = np.zeros(0, dtype=np.int64)
        self._ids = np.zeros(0, dtype=np.int64)
