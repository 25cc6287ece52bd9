"""Callbacks in isolation: throughput window, step seeding, when last.ckpt is written."""

from types import SimpleNamespace

import pytest
import torch

from transformer_nmt.callbacks import LastCheckpoint, StepSeed, TokenThroughput, throughput


class _Module:
    def __init__(self):
        self.hparams = SimpleNamespace(pad_id=0)
        self.logged = []

    def log(self, name, value, **kwargs):
        self.logged.append((name, value, kwargs))


def test_throughput_counts_non_pad_target_tokens_over_the_window(monkeypatch):
    clock = iter([0.0, 1.0, 3.0, 10.0, 11.0])
    monkeypatch.setattr(throughput.time, "perf_counter", lambda: next(clock))
    callback, module = TokenThroughput(window=2), _Module()
    batch = {"labels": torch.tensor([[5, 6, 2, 0], [7, 2, 0, 0]])}  # 5 tokens, 3 pads
    callback.on_train_start(None, module)  # t=0
    callback.on_train_batch_end(None, module, None, batch, 0)  # t=1: 5 tokens in 1 s
    callback.on_train_batch_end(None, module, None, batch, 1)  # t=3: 10 tokens in 3 s
    callback.on_validation_end(None, module)  # t=10: validation time is not counted
    callback.on_train_batch_end(None, module, None, batch, 2)  # t=11: window = last 2 batches
    rates = [value for _, value, _ in module.logged]
    assert rates == pytest.approx([5.0, 10 / 3, 10 / 3])
    name, _, options = module.logged[0]
    assert name == "train/tokens_per_sec" and options["reduce_fx"] == "sum"
    assert options["sync_dist"] is True


def _dropout_mask(callback, epoch, batch_idx, rank):
    trainer = SimpleNamespace(current_epoch=epoch, global_rank=rank)
    callback.on_train_batch_start(trainer, None, None, batch_idx)
    return torch.nn.functional.dropout(torch.ones(64), p=0.5)


def test_step_seed_makes_dropout_a_function_of_the_position():
    callback = StepSeed(seed=3)
    first = _dropout_mask(callback, 0, 7, 0)
    torch.rand(100)  # whatever happened in between
    assert torch.equal(_dropout_mask(callback, 0, 7, 0), first)
    assert not torch.equal(_dropout_mask(callback, 0, 8, 0), first)
    assert not torch.equal(_dropout_mask(callback, 0, 7, 1), first)
    assert not torch.equal(_dropout_mask(StepSeed(seed=4), 0, 7, 0), first)


class _Trainer:
    def __init__(self, max_steps):
        self.max_steps, self.global_step, self.should_stop = max_steps, 0, False
        self.saved = []

    def save_checkpoint(self, path, weights_only=None):
        self.saved.append((self.global_step, path.name))


def test_last_checkpoint_every_n_steps_and_at_the_last_step(tmp_path):
    callback, trainer = LastCheckpoint(str(tmp_path), every_n_train_steps=5), _Trainer(12)
    for step in range(1, 13):
        trainer.global_step = step
        callback.on_train_batch_end(trainer, None, None, None, step - 1)
    callback.on_train_end(trainer, None)  # already saved at step 12: no second write
    assert trainer.saved == [(5, "last.ckpt"), (10, "last.ckpt"), (12, "last.ckpt")]


def test_last_checkpoint_when_training_is_told_to_stop(tmp_path):
    callback, trainer = LastCheckpoint(str(tmp_path), every_n_train_steps=100), _Trainer(-1)
    trainer.global_step, trainer.should_stop = 7, True  # e.g. max_time reached
    callback.on_train_batch_end(trainer, None, None, None, 6)
    assert trainer.saved == [(7, "last.ckpt")]
    with pytest.raises(ValueError, match="every_n_train_steps must be >= 1"):
        LastCheckpoint(str(tmp_path), every_n_train_steps=0)
