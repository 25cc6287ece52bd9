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


def test_a_full_disk_names_the_checkpoint_and_its_size_and_keeps_the_previous_one(
    tmp_path, monkeypatch, capsys
):
    import errno
    import os

    from omegaconf import OmegaConf

    from transformer_nmt.atomic import WriteError
    from transformer_nmt.cli.errors import exit_on_user_error

    io = AtomicCheckpointIO()
    path = tmp_path / "last.ckpt"
    io.save_checkpoint({"step": 1}, path)

    def disk_full(obj, handle, *args, **kwargs):
        handle.write(b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", disk_full)
    weights = {"step": 2, "state_dict": {"w": torch.zeros(1000, 1000)}}  # 4 MB of float32
    with pytest.raises(WriteError, match=r"No space left on device; .* needs about 4\.0 MB"):
        io.save_checkpoint(weights, path)
    monkeypatch.undo()
    assert io.load_checkpoint(path)["step"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]

    def train(cfg):  # what train.py meets: the error, raised from deep inside Lightning
        monkeypatch.setattr(torch, "save", disk_full)
        try:
            io.save_checkpoint(weights, path)
        finally:
            monkeypatch.undo()

    with pytest.raises(SystemExit) as exit_:
        exit_on_user_error(train, OmegaConf.create({}))
    assert exit_.value.code == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot write {path}: No space left")
