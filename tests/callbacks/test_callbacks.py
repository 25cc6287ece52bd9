"""Callbacks in isolation: throughput window, step seeding, when last.ckpt is written."""

from types import SimpleNamespace

import pytest
import torch

from tests.helpers.token_batches import fit_one_step, tiny_module, token_batch
from transformer_nmt.callbacks import LastCheckpoint, StepSeed, TokenThroughput, throughput
from transformer_nmt.callbacks.progress_bar import readable


class _Module:
    def __init__(self):
        self.tokens_trained = 0
        self.logged = []

    def log(self, name, value, **kwargs):
        self.logged.append((name, value, kwargs))


def test_throughput_logs_tokens_of_all_ranks_per_second_on_logging_steps(monkeypatch):
    clock = iter([0.0, 1.0, 3.0, 10.0, 12.0])
    monkeypatch.setattr(throughput.time, "perf_counter", lambda: next(clock))
    callback, module = TokenThroughput(), _Module()
    trainer = SimpleNamespace(global_step=0, log_every_n_steps=2)
    callback.on_train_start(trainer, module)  # t=0
    for step, tokens in [(1, 40), (2, 100)]:  # one optimizer step per batch
        trainer.global_step, module.tokens_trained = step, tokens
        callback.on_train_batch_end(trainer, module, None, None, step - 1)  # reads t=1 at step 2
    callback.on_validation_start(trainer, module)  # t=3: 7 s of validation are not counted
    callback.on_validation_end(trainer, module)  # t=10
    for step, tokens in [(3, 130), (3, 160), (4, 250)]:  # step 3: two micro-batches
        trainer.global_step, module.tokens_trained = step, tokens
        callback.on_train_batch_end(trainer, module, None, None, step)  # reads t=12 at step 4
    rates = [value for _, value, _ in module.logged]
    assert rates == pytest.approx([100 / 1.0, 150 / (2.0 + 2.0)])
    name, _, options = module.logged[0]
    assert name == "train/tokens_per_sec" and "sync_dist" not in options


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


def test_the_progress_bar_shows_small_numbers_with_three_significant_digits():
    assert readable("lr", 0.000699123) == "0.000699"  # Lightning's format gave "0.000"
    assert readable("lr", 1.5e-7) == "1.5e-07"
    assert readable("train/loss", 4.51234) == "4.512"
    assert readable("train/tokens_per_sec", 24312.4) == "24,312"
    assert readable("v_num", 3) == 3 and readable("note", "x") == "x"


def test_last_checkpoint_counts_optimizer_steps_under_accumulation(tmp_path):
    """With 2 batches per optimizer step, every_n_train_steps=2 saves after batches 4 and 8."""

    class Recording(LastCheckpoint):
        saves = []

        def _save(self, trainer):
            if trainer.global_step != self._saved_step:
                self.saves.append((trainer.global_step, trainer.fit_loop.total_batch_idx + 1))
            super()._save(trainer)

    batches = [token_batch(5 + i, seed=i) for i in range(8)]
    callback = Recording(str(tmp_path), every_n_train_steps=2)
    fit_one_step(tiny_module(), batches, accumulate=2, max_steps=4, callbacks=[callback],
                 enable_checkpointing=True)  # fmt: skip
    assert callback.saves == [(2, 4), (4, 8)]
