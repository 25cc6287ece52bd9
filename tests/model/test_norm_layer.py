"""``model.norm_layer``: LayerNorm (the paper) or RMSNorm in every residual connection and at each
stack's end under pre-norm."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.helpers.tiny_model import PAD, tiny_config
from transformer_nmt.model import Transformer
from transformer_nmt.model.residual import RMSNorm
from transformer_nmt.training.loss import label_smoothed_loss


def test_rmsnorm_gives_unit_rms_per_position_times_its_gain():
    torch.manual_seed(0)
    norm = RMSNorm(16)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 2.0)
    x = torch.randn(3, 5, 16) * 7 + 3  # a mean and a scale that RMSNorm must not keep
    y = norm(x)
    rms = (y / norm.weight).pow(2).mean(dim=-1).sqrt()
    torch.testing.assert_close(rms, torch.ones(3, 5), rtol=1e-4, atol=1e-4)
    expected = F.rms_norm(x, (16,), norm.weight, eps=norm.eps)  # PyTorch's own
    torch.testing.assert_close(y, expected)
    assert not torch.allclose(y, F.layer_norm(x, (16,), norm.weight), atol=1e-2)  # kept the mean


def test_rmsnorm_returns_its_inputs_dtype_as_layernorm_does():
    x = torch.randn(2, 3, 16, dtype=torch.bfloat16)
    for norm in (RMSNorm(16), nn.LayerNorm(16)):
        assert norm.to(torch.bfloat16)(x).dtype == torch.bfloat16
    torch.testing.assert_close(
        RMSNorm(16)(x).float(), F.rms_norm(x.float(), (16,)).bfloat16().float()
    )


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_an_rmsnorm_model_has_no_layernorm_and_every_weight_learns(norm):
    torch.manual_seed(0)
    config = tiny_config(norm=norm, norm_layer="rmsnorm", dropout=0.0)
    model = Transformer(config)
    modules = list(model.modules())
    assert not any(isinstance(m, nn.LayerNorm) for m in modules)
    finals = 2 if norm == "pre" else 0  # each stack's final norm
    assert sum(isinstance(m, RMSNorm) for m in modules) == 2 * 2 + 3 * 2 + finals
    layernorm_params = Transformer(tiny_config(norm=norm, dropout=0.0)).num_parameters()
    assert model.num_parameters() == layernorm_params - (2 * 2 + 3 * 2 + finals) * 32  # no bias

    src = torch.randint(1, 23, (4, 7))
    tgt = torch.randint(1, 19, (4, 6))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(20):
        optimizer.zero_grad()
        loss = label_smoothed_loss(model(src, tgt[:, :-1]), tgt[:, 1:], PAD, 0.0).means()[0]
        loss.backward()
        if not losses:
            for name, parameter in model.named_parameters():
                assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
        losses.append(loss.item())
        optimizer.step()
    assert losses[-1] < losses[0] / 2  # the batch is learned


def test_an_unknown_norm_layer_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="norm_layer must be one of 'layernorm', 'rmsnorm'"):
        tiny_config(norm_layer="batchnorm")
