"""Atomic checkpoint writes: complete or untouched, no temporaries left behind."""

import pytest
import torch

from transformer_nmt.checkpoint import AtomicCheckpointIO


class _Unpicklable:
    def __reduce__(self):
        raise RuntimeError("simulated crash while writing")


def test_save_then_load_round_trips(tmp_path):
    io = AtomicCheckpointIO()
    path = tmp_path / "nested" / "last.ckpt"
    io.save_checkpoint({"step": 3, "w": torch.arange(4)}, path)
    loaded = io.load_checkpoint(path)
    assert loaded["step"] == 3 and torch.equal(loaded["w"], torch.arange(4))
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.ckpt"]


def test_a_failed_write_keeps_the_previous_checkpoint(tmp_path):
    io = AtomicCheckpointIO()
    path = tmp_path / "last.ckpt"
    io.save_checkpoint({"step": 1}, path)
    with pytest.raises(RuntimeError, match="simulated crash"):
        io.save_checkpoint({"step": 2, "bad": _Unpicklable()}, path)
    assert io.load_checkpoint(path)["step"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


def test_temporaries_of_a_killed_writer_are_cleaned_up(tmp_path):
    stale = tmp_path / ".last.ckpt.abc123.tmp"
    stale.write_bytes(b"half a checkpoint")
    AtomicCheckpointIO().save_checkpoint({"step": 5}, tmp_path / "last.ckpt")
    assert not stale.exists()
