"""Examples and batches: special-token placement, truncation, empty pairs, the encoded cache."""

import logging

import pytest
import torch

from tests.helpers.corpus import EMPTY_PAIR_INDEX, LONG_PAIR_INDEX, write_lines
from transformer_nmt.data import encoding
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


def test_truncation_and_empty_pairs_are_counted_and_logged_once(make_dm, caplog):
    dm = make_dm(max_len=32)
    with caplog.at_level(logging.INFO, logger="transformer_nmt.data"):
        dm.setup("fit")
        dm.setup("fit")
    stats = dm.datasets["train"].stats
    assert (stats.pairs, stats.examples, stats.dropped_empty) == (240, 239, 1)
    assert (stats.truncated_src, stats.truncated_tgt) == (1, 1)
    train_logs = [r.getMessage() for r in caplog.records if r.getMessage().startswith("train:")]
    assert len(train_logs) == 1
    assert (
        "dropped 1 pairs" in train_logs[0] and "truncated 1 sources and 1 targets" in train_logs[0]
    )
    examples = dm.datasets["train"]
    assert EMPTY_PAIR_INDEX not in examples.example_ids
    long_row = list(examples.example_ids).index(LONG_PAIR_INDEX)
    assert examples.src_lengths[long_row] == examples.tgt_lengths[long_row] == 32


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

    monkeypatch.setattr(encoding, "encode_to_arrays", no_encoding)
    dm = make_dm(max_len=16)  # truncation is applied on top of the cache
    dm.setup(None)
    assert len(dm.datasets["test"]) == 25
    assert dm.datasets["train"].stats.truncated_src > 1


def test_encode_source_and_decode(make_dm, tiny_pairs):
    dm = make_dm(max_len=6)
    en, de = tiny_pairs["train"][0]
    encoded = dm.encode_source([en, tiny_pairs["train"][LONG_PAIR_INDEX][0]])
    assert encoded[0] == encode_texts(dm.tokenizer, [en])[0] + [dm.eos_id]
    assert len(encoded[1]) == 6 and encoded[1][-1] == dm.eos_id
    target = encode_texts(dm.tokenizer, [de], target=True)[0]
    assert dm.decode(torch.tensor([dm.bos_id, *target, dm.eos_id, 5, 6])) == de


def test_setup_rejects_unknown_stage(make_dm):
    with pytest.raises(ValueError, match="unknown stage"):
        make_dm().setup("tune")
