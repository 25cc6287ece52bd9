"""The real Multi30k corpus, read from MULTI30K_DIR (skipped, saying so, when that is unset).

Slow: the session's Multi30k datamodule trains an 8000-type BPE on 29000 pairs.
"""

import itertools
import unicodedata

import numpy as np
import pytest

from tests.helpers.run_if import run_if
from tests.helpers.vocabulary import words_fused_with_punctuation
from transformer_nmt.data import TokenBucketBatchSampler, padding_fraction
from transformer_nmt.data.encoding import encode_texts

pytestmark = [pytest.mark.slow, run_if(multi30k=True)]


def test_line_counts(multi30k_dm):
    counts = {split: len(multi30k_dm.raw_pairs(split)) for split in ("train", "val", "test")}
    assert counts == {"train": 29000, "val": 1014, "test": 1000}
    assert {s: len(d) for s, d in multi30k_dm.datasets.items()} == counts


def test_tokenizer_round_trip_is_exact_on_every_sentence(multi30k_dm):
    """decode(encode(s)) == NFKC(s) for both sides of every train, val and test pair."""
    tokenizer, unk = multi30k_dm.tokenizer, multi30k_dm.tokenizer.unk_token_id
    assert multi30k_dm.vocab_size == 8000
    mismatched = []
    for split in ("train", "val", "test"):
        texts = [unicodedata.normalize("NFKC", t) for p in multi30k_dm.raw_pairs(split) for t in p]
        encoded = encode_texts(tokenizer, texts)
        assert sum(unk in ids for ids in encoded) == 0
        decoded = tokenizer.batch_decode(encoded)
        mismatched += [(t, d) for t, d in zip(texts, decoded, strict=True) if t != d]
    assert mismatched == []


def test_the_cached_ids_are_the_tokenizers_ids(multi30k_dm):
    """The cache, built one distinct word at a time, equals encoding each sentence whole."""
    for split in ("train", "val", "test"):
        encoded = multi30k_dm.datasets[split].encoded
        pairs = multi30k_dm.raw_pairs(split)
        for side, texts in (("src", [s for s, _ in pairs]), ("tgt", [t for _, t in pairs])):
            expected = encode_texts(multi30k_dm.tokenizer, texts)
            offsets = getattr(encoded, f"{side}_offsets")
            assert np.array_equal(np.diff(offsets), [len(ids) for ids in expected])
            flat = np.fromiter(itertools.chain.from_iterable(expected), np.int64)
            assert np.array_equal(getattr(encoded, f"{side}_tokens"), flat), (split, side)


def test_no_bpe_type_fuses_a_word_with_punctuation(multi30k_dm):
    # with spaces as the only split, 1242 of the 8000 types were such, like "▁street."
    assert words_fused_with_punctuation(multi30k_dm.tokenizer) == []


def test_epoch_within_budget_and_exactly_once_across_two_ranks(multi30k_dm):
    lengths = multi30k_dm.datasets["train"].lengths
    shards = [
        list(TokenBucketBatchSampler(lengths, max_tokens=4096, rank=rank, world_size=2))
        for rank in range(2)
    ]
    assert len(shards[0]) == len(shards[1])
    seen = np.concatenate([b for shard in shards for b in shard])
    assert np.array_equal(np.sort(seen), np.arange(29000))
    assert all(len(b) * lengths[b].max() <= 4096 for shard in shards for b in shard)


def test_bucketing_keeps_padding_small(multi30k_dm):
    train = multi30k_dm.datasets["train"]
    bucketed = list(TokenBucketBatchSampler(train.lengths, max_tokens=4096))
    fixed = list(TokenBucketBatchSampler(train.lengths, max_sentences=128, bucket_by_length=False))
    bucketed_padding = padding_fraction(train.src_lengths, train.tgt_lengths, bucketed)
    fixed_padding = padding_fraction(train.src_lengths, train.tgt_lengths, fixed)
    assert bucketed_padding < 0.15 < fixed_padding
