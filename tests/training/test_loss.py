"""Label-smoothed cross-entropy as sums over tokens, and the stop on a non-finite update."""

import pytest
import torch
import torch.nn.functional as F

from transformer_nmt.training.loss import (
    NonFiniteLossError,
    check_finite_update,
    label_smoothed_loss,
)

PAD = 0


@pytest.fixture
def batch():
    logits = torch.randn(3, 5, 11, dtype=torch.float64)
    labels = torch.randint(1, 11, (3, 5))
    labels[0, 3:] = PAD
    labels[2, 1:] = PAD
    return logits, labels


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.3])
def test_sums_match_torch_cross_entropy_with_label_smoothing(batch, epsilon):
    logits, labels = batch
    out = label_smoothed_loss(logits, labels, PAD, epsilon)
    flat_logits, flat_labels = logits.reshape(-1, 11).float(), labels.reshape(-1)
    expected = F.cross_entropy(
        flat_logits, flat_labels, ignore_index=PAD, label_smoothing=epsilon, reduction="sum"
    )
    assert out.loss_sum.item() == pytest.approx(expected.item(), rel=1e-5)
    nll = F.cross_entropy(flat_logits, flat_labels, ignore_index=PAD, reduction="sum")
    assert out.nll_sum.item() == pytest.approx(nll.item(), rel=1e-5)
    assert int(out.n_tokens) == int((labels != PAD).sum()) == 9
    loss, _ = out.means()
    assert loss.item() == pytest.approx(expected.item() / 9, rel=1e-5)


def test_padding_positions_do_not_change_the_loss(batch):
    logits, labels = batch
    changed = logits.clone()
    changed[labels == PAD] = 1e4  # garbage where the label is padding
    a = label_smoothed_loss(logits, labels, PAD, 0.1)
    b = label_smoothed_loss(changed, labels, PAD, 0.1)
    assert a.loss_sum.item() == pytest.approx(b.loss_sum.item())


def test_bad_label_smoothing_is_rejected(batch):
    with pytest.raises(ValueError, match=r"label_smoothing must be in \[0, 1\)"):
        label_smoothed_loss(*batch, PAD, 1.0)


def test_a_non_finite_loss_or_gradient_raises_with_the_step_and_the_fix():
    check_finite_update(step=3, loss=2.5, grad_norm=0.7)
    with pytest.raises(NonFiniteLossError, match="training loss not finite at step 7.*ckpt_path="):
        check_finite_update(step=7, loss=float("nan"), grad_norm=0.7)
    with pytest.raises(NonFiniteLossError, match=r"gradient not finite at step 7 \(loss 2.5"):
        check_finite_update(step=7, loss=2.5, grad_norm=float("inf"))


def test_a_non_finite_update_ends_the_command_with_one_error_line(capsys):
    from omegaconf import OmegaConf

    from transformer_nmt.cli.errors import exit_on_user_error

    def diverging_training(cfg):
        check_finite_update(step=7, loss=float("nan"), grad_norm=0.7)

    with pytest.raises(SystemExit) as stopped:
        exit_on_user_error(diverging_training, OmegaConf.create({}))
    assert stopped.value.code == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: training loss not finite at step 7")
