"""Encoding one distinct word at a time gives exactly the tokenizer's ids."""

import itertools
import unicodedata

import numpy as np
from tokenizers import pre_tokenizers

from transformer_nmt.data.encoding import encode_texts
from transformer_nmt.data.tokenizer import splits_at_spaces, train_bpe
from transformer_nmt.data.word_table import WordTable

SENTENCES = [
    "A dog runs in the park.",
    "Two  spaces,   three spaces; „Zitat“ (1990s) 3.5% U.S.-based",
    "x ´y and ´cause",  # NFKC turns ´ into a space + combining accent
    "a \u00a0b c\u00a0d",  # a no-break space after a space, and inside a word
    "tab\tin a word, ▁x and a▁b",
    "",
    "Ünïcödé ﬁne ½ ＡＢＣ",
]


def test_word_table_encodes_exactly_like_the_tokenizer():
    tokenizer = train_bpe([[unicodedata.normalize("NFKC", s) for s in SENTENCES] * 2], 120)
    assert splits_at_spaces(tokenizer)
    table = WordTable(tokenizer)
    for texts in (SENTENCES, SENTENCES[::-1] * 3):  # new words, then the table's own
        ids, lengths = table.encode(texts)
        expected = encode_texts(tokenizer, texts)
        assert lengths.tolist() == [len(e) for e in expected]
        assert ids.tolist() == list(itertools.chain.from_iterable(expected))
    marked = {word for word, row in table.rows.items() if row < 0}
    assert {"´y", "´cause", "\u00a0b", "▁x"} <= marked  # their sentences were encoded whole
    tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    assert not splits_at_spaces(tokenizer)  # another pipeline: encoded sentence by sentence


def test_a_full_table_starts_afresh_and_stays_exact(make_dm, tiny_pairs):
    tokenizer = make_dm().tokenizer
    table = WordTable(tokenizer, max_words=12)
    texts = [en for en, _ in tiny_pairs["train"]]
    for start in range(0, len(texts), 8):
        chunk = texts[start : start + 8]
        ids, _ = table.encode(chunk)
        expected = itertools.chain.from_iterable(encode_texts(tokenizer, chunk))
        assert np.array_equal(ids, np.fromiter(expected, np.int64))
        assert len(table.rows) <= 12 + len({w for t in chunk for w in t.split(" ")})
