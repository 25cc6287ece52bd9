"""Each optimizer step descends the loss per target token of the whole step: accumulated
micro-batches of very different sizes weigh by their tokens, as do DDP ranks."""

import subprocess
import sys

import pytest
import torch

from tests.helpers import REPO_ROOT, ddp_token_mean
from tests.helpers.commands import script_environment
from tests.helpers.token_batches import (
    applied_gradients,
    fit_one_step,
    tiny_module,
    token_batch,
    token_mean_gradients,
)
from transformer_nmt.callbacks import LastCheckpoint
from transformer_nmt.checkpoint import AtomicCheckpointIO, CheckpointError, save_checkpoint
from transformer_nmt.training.loss import NonFiniteLossError

TOKENS = (5, 44, 2)  # target tokens of the three micro-batches of one step


def relative_difference(a: dict, b: dict) -> float:
    difference = sum(float((a[k] - b[k]).norm() ** 2) for k in a) ** 0.5
    return difference / sum(float(b[k].norm() ** 2) for k in b) ** 0.5


@pytest.mark.parametrize(("fused_loss", "clip"), [(True, None), (False, 1e-3)])
def test_accumulation_applies_the_token_weighted_gradient(fused_loss, clip):
    batches = [token_batch(n, seed) for seed, n in enumerate(TOKENS)]
    module = tiny_module(fused_loss=fused_loss)
    initial = {key: value.clone() for key, value in module.state_dict().items()}
    fit_one_step(module, batches, accumulate=3, gradient_clip_val=clip)
    expected = token_mean_gradients(initial, batches)
    if clip:  # clipping sees the token mean's gradient, not the accumulated sums
        norm = torch.nn.utils.get_total_norm(list(expected.values()))
        assert norm > clip
        expected = {key: grad * (clip / (norm + 1e-6)) for key, grad in expected.items()}
    applied = applied_gradients(module)
    for key, grad in expected.items():
        torch.testing.assert_close(applied[key], grad, rtol=1e-5, atol=1e-7 * float(norm_of(grad)))
    # The mean of the micro-batches' own means, what a per-batch mean trains, is far from it.
    per_batch = [token_mean_gradients(initial, [batch]) for batch in batches]
    mean_of_means = {key: sum(g[key] for g in per_batch) / len(batches) for key in expected}
    assert relative_difference(mean_of_means, token_mean_gradients(initial, batches)) > 0.5


def norm_of(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.abs().max().clamp(min=1.0)


@pytest.mark.slow  # two processes train
def test_two_ddp_ranks_apply_the_token_weighted_gradient_of_all_their_batches(tmp_path):
    out = tmp_path / "gradients.pt"
    result = subprocess.run(
        [sys.executable, "-m", "tests.helpers.ddp_token_mean", str(out)],
        cwd=REPO_ROOT, env=script_environment(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    saved = torch.load(out, weights_only=False)
    every_batch = [batch for rank in (0, 1) for batch in ddp_token_mean.rank_batches(rank)]
    expected = token_mean_gradients(saved["initial"], every_batch)
    for key, grad in expected.items():
        torch.testing.assert_close(saved["applied"][key], grad, rtol=1e-5, atol=1e-7)


def test_a_non_finite_gradient_stops_before_the_step_and_keeps_the_last_checkpoint(tmp_path):
    """A finite loss with an infinite gradient (here from a hook at step 3) stops training
    before the optimizer applies it; last.ckpt keeps step 2's finite weights."""
    module = tiny_module()
    weight = module.model.output_projection.weight

    def infinite_at_step_3(grad: torch.Tensor) -> torch.Tensor:
        return grad * float("inf") if module.global_step == 2 else grad

    weight.register_hook(infinite_at_step_3)
    batches = [token_batch(n, seed) for seed, n in enumerate((7, 9, 11, 13, 15))]
    checkpointing = dict(
        callbacks=[LastCheckpoint(str(tmp_path), every_n_train_steps=1)],
        plugins=[AtomicCheckpointIO()],
        enable_checkpointing=True,
    )
    with pytest.raises(NonFiniteLossError, match=r"gradient not finite at step 3 \(loss \d"):
        fit_one_step(module, batches, accumulate=1, max_steps=5, **checkpointing)
    assert module.global_step == 2 and all(p.isfinite().all() for p in module.parameters())
    checkpoint = torch.load(tmp_path / "last.ckpt", weights_only=False)
    assert checkpoint["global_step"] == 2
    for key, value in module.state_dict().items():  # the weights the refused step left alone
        assert torch.equal(checkpoint["state_dict"][key], value)


def test_a_checkpoint_with_non_finite_weights_is_never_written(tmp_path):
    path = tmp_path / "last.ckpt"
    save_checkpoint({"state_dict": {"model.w": torch.ones(3)}, "global_step": 1}, path)
    broken = {"state_dict": {"model.w": torch.tensor([1.0, float("nan"), 2.0])}, "global_step": 2}
    with pytest.raises(CheckpointError, match=r"refusing to write .*model\.w"):
        AtomicCheckpointIO().save_checkpoint(broken, path)
    assert torch.load(path, weights_only=False)["global_step"] == 1
