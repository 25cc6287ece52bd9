"""The real Multi30k corpus, read from MULTI30K_DIR (skipped, saying so, when that is unset).

Slow: the session's Multi30k datamodule trains an 8000-type BPE on 29000 pairs.
"""

import numpy as np
import pytest

from transformer_nmt.data import TokenBucketBatchSampler, padding_fraction
from transformer_nmt.data.encoding import encode_texts

pytestmark = pytest.mark.slow


def test_line_counts(multi30k_dm):
    counts = {split: len(multi30k_dm.raw_pairs(split)) for split in ("train", "val", "test")}
    assert counts == {"train": 29000, "val": 1014, "test": 1000}
    assert {s: len(d) for s, d in multi30k_dm.datasets.items()} == counts


def test_tokenizer_round_trip(multi30k_dm):
    tokenizer, unk = multi30k_dm.tokenizer, multi30k_dm.tokenizer.unk_token_id
    assert multi30k_dm.vocab_size == 8000
    texts = [text for pair in multi30k_dm.raw_pairs("val") for text in pair]
    encoded = encode_texts(tokenizer, texts)
    with_unk = sum(unk in ids for ids in encoded)
    assert with_unk <= 2  # characters never seen in training
    mismatched = [
        text
        for text, ids in zip(texts, encoded, strict=True)
        if unk not in ids and multi30k_dm.decode(ids) != " ".join(text.split())
    ]
    assert mismatched == []


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
