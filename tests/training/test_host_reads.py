"""A training step never waits for the device: the host reads the step's numbers (loss, gradient
norm, the non-finite guard, token count) on logging steps only; between them a non-finite update
is skipped on the device (fused Adam's ``found_inf``) and reported at the next logging step."""

from __future__ import annotations

import contextlib

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from tests.helpers.run_if import run_if
from tests.helpers.token_batches import fit_one_step, tiny_module, token_batch
from transformer_nmt.training.loss import NonFiniteLossError

LOG_EVERY = 4
HOST_READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")


class StepsBetweenLogs(Callback):
    """Runs ``context()`` around every training batch whose optimizer step is no logging step."""

    def __init__(self, context) -> None:
        self.context, self.entered, self._open = context, 0, None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if (trainer.global_step + 1) % LOG_EVERY:
            self._open = contextlib.ExitStack()
            self._open.enter_context(self.context())
            self.entered += 1

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._open is not None:
            self._open.close()
            self._open = None


def batches(count: int, device: str = "cpu") -> list[dict]:
    return [
        {k: v.to(device) for k, v in token_batch(9 + 3 * i, seed=i).items()} for i in range(count)
    ]


def test_no_host_read_between_logging_steps(monkeypatch):
    reads: list[str] = []
    counting = [False]
    for name in HOST_READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _name=name, _original=original, **kwargs):
            if counting[0]:
                reads.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)

    @contextlib.contextmanager
    def count_reads():
        counting[0] = True
        try:
            yield
        finally:
            counting[0] = False

    steps = StepsBetweenLogs(count_reads)
    module = tiny_module(optimizer={"fused": True})
    fit_one_step(
        module, batches(10), accumulate=1, max_steps=10, log_every_n_steps=LOG_EVERY,
        callbacks=[steps],
    )  # fmt: skip
    assert steps.entered == 8  # steps 1-3, 5-7, 9, 10
    assert reads == []
    assert module.tokens_trained == sum(int((b["labels"] != 0).sum()) for b in batches(10))


@run_if(min_gpus=1)
def test_no_device_sync_between_logging_steps_on_a_gpu():
    @contextlib.contextmanager
    def syncs_are_errors():
        torch.cuda.set_sync_debug_mode("error")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode("default")

    steps = StepsBetweenLogs(syncs_are_errors)
    module = tiny_module()  # fused Adam: the default on a GPU
    fit_one_step(
        module, batches(10), accumulate=1, max_steps=10, log_every_n_steps=LOG_EVERY,
        callbacks=[steps], accelerator="gpu", devices=1, precision="bf16-mixed",
    )  # fmt: skip
    assert steps.entered == 8 and module.global_step == 10


class Snapshot(Callback):
    def __init__(self, at_step: int) -> None:
        self.at_step, self.state = at_step, None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.at_step:
            self.state = {k: v.clone() for k, v in pl_module.state_dict().items()}


def test_a_non_finite_step_is_skipped_on_the_device_and_reported_at_the_next_logging_step():
    module = tiny_module(optimizer={"fused": True})
    weight = module.model.output_projection.weight

    def infinite_at_step_3(grad: torch.Tensor) -> torch.Tensor:
        return grad * float("inf") if module.global_step == 2 else grad

    weight.register_hook(infinite_at_step_3)
    after_step_2 = Snapshot(at_step=2)
    with pytest.raises(NonFiniteLossError, match=r"gradient not finite at step 3 \(loss \d"):
        fit_one_step(
            module, batches(6), accumulate=1, max_steps=6, log_every_n_steps=LOG_EVERY,
            callbacks=[after_step_2],
        )  # fmt: skip
    # step 3 ran as a no-op; step 4, a logging step, read the guard and stopped before its update
    assert module.global_step == 3
    optimizer = module.trainer.optimizers[0]
    assert all(int(state["step"]) == 2 for state in optimizer.state.values())
    for key, value in module.state_dict().items():
        assert torch.equal(after_step_2.state[key], value), key
