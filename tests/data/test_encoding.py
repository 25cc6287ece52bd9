"""Examples and batches: special-token placement, truncation, empty pairs, the encoded cache."""

import gzip
import logging
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers.corpus import EMPTY_PAIR_INDEX, LONG_PAIR_INDEX, write_lines
from tests.helpers.run_if import run_if
from transformer_nmt.data import DataError, encoding
from transformer_nmt.data.bucketing import TokenBucketBatchSampler
from transformer_nmt.data.encoding import encode_texts


def test_bos_eos_pad_placement(make_dm):
    dm = make_dm()
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert set(batch) == {"src_ids", "tgt_in_ids", "labels", "ids"}
    assert all(t.dtype == torch.long for t in batch.values())
    assert batch["tgt_in_ids"].shape == batch["labels"].shape
    for row, pair_id in enumerate(batch["ids"].tolist()):
        src_text, tgt_text = dm.raw_pairs("train")[pair_id]
        src = encode_texts(dm.tokenizer, [src_text])[0]
        tgt = encode_texts(dm.tokenizer, [tgt_text], target=True)[0]
        src_pad = batch["src_ids"].shape[1] - len(src) - 1
        tgt_pad = batch["labels"].shape[1] - len(tgt) - 1
        assert batch["src_ids"][row].tolist() == src + [dm.eos_id] + [dm.pad_id] * src_pad
        assert batch["tgt_in_ids"][row].tolist() == [dm.bos_id] + tgt + [dm.pad_id] * tgt_pad
        assert batch["labels"][row].tolist() == tgt + [dm.eos_id] + [dm.pad_id] * tgt_pad


def test_overlong_and_empty_training_pairs_are_dropped_counted_and_logged_once(make_dm, caplog):
    dm = make_dm(max_len=32)
    with caplog.at_level(logging.INFO, logger="transformer_nmt.data"):
        dm.setup("fit")
        dm.setup("fit")
    stats = dm.datasets["train"].stats
    assert (stats.pairs, stats.examples, stats.dropped_empty, stats.dropped_overlong) == (
        240,
        238,
        1,
        1,
    )
    assert (stats.truncated_src, stats.truncated_tgt) == (0, 0)
    train_logs = [r.getMessage() for r in caplog.records if r.getMessage().startswith("train:")]
    assert len(train_logs) == 1
    assert "dropped 1 pairs with an empty side" in train_logs[0]
    assert "dropped 1 pairs with a side longer than max_len=32" in train_logs[0]
    examples = dm.datasets["train"]
    assert EMPTY_PAIR_INDEX not in examples.example_ids
    assert LONG_PAIR_INDEX not in examples.example_ids
    assert examples.lengths.max() <= 32


def test_overlong_truncate_keeps_the_pair_cut_to_max_len(make_dm, caplog):
    dm = make_dm(max_len=32, overlong="truncate")
    with caplog.at_level(logging.INFO, logger="transformer_nmt.data"):
        dm.setup("fit")
    stats = dm.datasets["train"].stats
    assert (stats.examples, stats.dropped_overlong) == (239, 0)
    assert (stats.truncated_src, stats.truncated_tgt) == (1, 1)
    assert any("truncated 1 sources and 1 targets" in r.getMessage() for r in caplog.records)
    examples = dm.datasets["train"]
    long_row = list(examples.example_ids).index(LONG_PAIR_INDEX)
    assert examples.src_lengths[long_row] == examples.tgt_lengths[long_row] == 32
    _, src, tgt = examples[long_row]
    assert len(src) == len(tgt) == 31  # + EOS (source), BOS/EOS (target) = max_len


def test_evaluation_splits_keep_overlong_pairs_truncated(make_dm, tiny_dir, tiny_pairs):
    pairs = list(tiny_pairs["val"])
    pairs[4] = tiny_pairs["train"][LONG_PAIR_INDEX]
    write_lines(tiny_dir / "val.en", [en for en, _ in pairs])
    write_lines(tiny_dir / "val.de", [de for _, de in pairs])
    dm = make_dm(max_len=32)  # overlong=drop applies to training pairs only
    dm.setup("validate")
    stats = dm.datasets["val"].stats
    assert (stats.examples, stats.dropped_overlong, stats.truncated_src) == (30, 0, 1)
    assert dm.datasets["val"].src_lengths[4] == 32


def test_no_side_longer_than_max_len(make_dm):
    dm = make_dm(max_len=12, max_tokens=64)
    for batch in dm.train_dataloader():
        assert batch["src_ids"].shape[1] <= 12 and batch["labels"].shape[1] <= 12


def test_validation_keeps_empty_pairs_for_references(make_dm, tiny_dir, tiny_pairs):
    targets = [de for _, de in tiny_pairs["val"]]
    targets[3] = ""
    write_lines(tiny_dir / "val.de", targets)
    dm = make_dm()
    dm.setup("validate")
    assert dm.datasets["val"].stats.kept_empty == 1
    ids = torch.cat([b["ids"] for b in dm.val_dataloader()])
    assert sorted(ids.tolist()) == list(range(30))


def test_encoded_splits_are_cached_across_runs(make_dm, monkeypatch):
    make_dm().setup(None)

    def no_encoding(*args, **kwargs):
        raise AssertionError("a split was re-encoded despite the cache")

    monkeypatch.setattr(encoding, "encode_split", no_encoding)
    dm = make_dm(max_len=16, overlong="truncate")  # the max_len policy applies on top of the cache
    dm.setup(None)
    assert len(dm.datasets["test"]) == 25
    assert dm.datasets["train"].stats.truncated_src > 1


def test_encode_source_truncates_with_a_count_and_decode(make_dm, tiny_pairs, caplog):
    dm = make_dm(max_len=6)
    en, de = tiny_pairs["train"][0]
    long_en = tiny_pairs["train"][LONG_PAIR_INDEX][0]
    with caplog.at_level(logging.WARNING, logger="transformer_nmt.data"):
        encoded = dm.encode_source([en, long_en, long_en])
    assert encoded[0] == encode_texts(dm.tokenizer, [en])[0] + [dm.eos_id]
    assert len(encoded[1]) == 6 and encoded[1][-1] == dm.eos_id
    assert "2 of 3 source sentences are longer than max_len=6" in caplog.text
    target = encode_texts(dm.tokenizer, [de], target=True)[0]
    assert dm.decode(torch.tensor([dm.bos_id, *target, dm.eos_id, 5, 6])) == de


def test_setup_rejects_unknown_stage(make_dm):
    with pytest.raises(ValueError, match="unknown stage"):
        make_dm().setup("tune")


def test_empty_training_file_is_an_error_naming_it_and_nothing_is_cached(
    make_dm, tiny_dir, fresh_cache_dir
):
    for lang in ("en", "de"):
        (tiny_dir / f"train.{lang}.gz").write_bytes(gzip.compress(b""))
    with pytest.raises(DataError, match="holds only 0 sentence pairs") as error:
        make_dm().setup("fit")
    message = str(error.value)
    assert str(tiny_dir / "train.en.gz") in message and "data.min_train_pairs=100" in message
    assert not any(p.name.startswith("bpe") for p in (fresh_cache_dir / "tokenizers").iterdir())


def test_too_few_usable_training_pairs_is_an_error_with_the_counts(make_dm):
    with pytest.raises(DataError, match="holds only 238 usable pairs") as error:
        make_dm(min_train_pairs=239).setup("fit")
    assert "240 read, 1 with an empty side and 1 over max_len=32" in str(error.value)
    assert len(make_dm(min_train_pairs=238).train_dataloader()) > 0


def test_vocabulary_far_below_vocab_size_is_a_warning_naming_both(make_dm, caplog):
    with caplog.at_level(logging.WARNING, logger="transformer_nmt.data"):
        dm = make_dm(vocab_size=5000)
        size = dm.vocab_size
    assert f"the joint BPE has {size} types, far below data.vocab_size=5000" in caplog.text


def test_batched_fetch_pads_like_one_example_at_a_time(make_dm, tiny_dir, tiny_pairs):
    targets = [de for _, de in tiny_pairs["val"]]
    targets[3] = ""  # an empty side, kept in validation
    write_lines(tiny_dir / "val.de", targets)
    dm = make_dm(max_len=8, overlong="truncate")  # many truncated sides
    dm.setup(None)
    for split, indices in (("train", [5, LONG_PAIR_INDEX, 0, 17]), ("val", [3, 1, 2])):
        examples = dm.datasets[split]
        batched = dm.collator(examples.__getitems__(indices))
        one_by_one = dm.collator([examples[i] for i in indices])
        assert batched.keys() == one_by_one.keys()
        for key, tensor in batched.items():
            assert torch.equal(tensor, one_by_one[key]), (split, key)


def test_what_a_rank_keeps_per_example_is_three_four_byte_arrays(make_dm):
    """The arrays a rank holds for the whole run grow with the corpus: 4-byte ids, source
    lengths and longer-side lengths, the last shared with the sampler rather than copied."""
    dm = make_dm()
    dm.setup("fit")
    examples = dm.datasets["train"]
    held = {k: v for k, v in vars(examples).items() if isinstance(v, np.ndarray)}
    assert set(held) == {"example_ids", "src_lengths", "lengths"}
    assert {v.dtype.itemsize for v in held.values()} == {4}
    sampler = dm.train_dataloader().batch_sampler
    assert sampler.lengths is examples.lengths
    np.testing.assert_array_equal(
        examples.lengths, np.maximum(examples.src_lengths, examples.tgt_lengths)
    )
    batches = sampler.rank_batches(0)
    assert {b.dtype.itemsize for b in batches} == {4}
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(examples)))


def test_a_rank_holds_its_own_share_of_the_epoch_order(make_dm):
    """Under DDP a rank's batches are views of an array of its own indices alone, not of the
    whole epoch's order."""
    dm = make_dm()
    dm.setup("fit")
    examples = dm.datasets["train"]
    shares = []
    for rank in (0, 1):
        sampler = TokenBucketBatchSampler(
            examples.lengths, max_tokens=dm.max_tokens, seed=3, rank=rank, world_size=2
        )
        batches = sampler.rank_batches(5)
        bases = {id(b.base) for b in batches}
        assert len(bases) == 1
        assert batches[0].base.size == sum(len(b) for b in batches) < len(examples)
        whole = sampler.global_batches(5)[rank::2]
        assert [b.tolist() for b in batches] == [b.tolist() for b in whole]
        shares.append(np.concatenate(batches))
    assert sorted(np.concatenate(shares).tolist()) == list(range(len(examples)))


def _mapped_kib(path) -> int:
    """Resident KiB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if line[0] in "0123456789abcdef" and "-" in line.split()[0]:
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


@run_if(linux=True)
def test_reading_a_batch_leaves_none_of_the_cached_files_mapped(tmp_path):
    """The kernel maps the cached pages around each read too, so a worker reading random
    sentences would map ever more of a large corpus; each batch unmaps what it read."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 40, 50_000)
    for side in ("src", "tgt"):
        np.save(
            tmp_path / f"{side}_tokens.npy", rng.integers(4, 60_000, lengths.sum()).astype(np.int32)
        )
        np.save(tmp_path / f"{side}_offsets.npy", np.concatenate([[0], np.cumsum(lengths)]))
    split = encoding.EncodedSplit.load(tmp_path)
    examples = encoding.TranslationExamples(split, max_len=64, drop_empty=True, drop_overlong=True)
    token_file = tmp_path / "src_tokens.npy"
    indices = rng.choice(len(examples), 300, replace=False)
    split.src_tokens[rng.integers(0, len(split.src_tokens), 300)].sum()  # a plain read of 300 ids
    assert _mapped_kib(token_file) >= 300 * 4  # leaves their pages mapped, and more
    batch = examples.__getitems__(indices.tolist())
    assert _mapped_kib(token_file) == 0 and _mapped_kib(tmp_path / "tgt_offsets.npy") == 0
    starts = split.src_offsets[examples.example_ids[indices]]
    assert (
        batch.src_tokens[: batch.src_lengths[0]].tolist()
        == split.src_tokens[starts[0] : starts[0] + batch.src_lengths[0]].tolist()
    )  # the ids themselves are intact


def test_a_loaded_split_pickles_as_its_directory(tmp_path):
    for name in encoding.EncodedSplit._FILES:
        np.save(tmp_path / f"{name}.npy", np.arange(5, dtype=np.int32))
    split = encoding.EncodedSplit.load(tmp_path)
    copy = pickle.loads(pickle.dumps(split))
    assert copy.directory == tmp_path and len(pickle.dumps(split)) < 1000  # no array data
    assert all(np.array_equal(getattr(copy, n), getattr(split, n)) for n in split._FILES)
    assert not copy.src_tokens.flags.writeable
