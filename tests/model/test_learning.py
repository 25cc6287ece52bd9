"""Both norm placements must actually learn: a real (small) training run, not a smoke test."""

import pytest
import torch
import torch.nn.functional as F

from tests.helpers.reverse_task import (
    PAD,
    reverse_task_batch,
    reverse_task_config,
    train_on_reverse_task,
)
from transformer_nmt.model import Transformer


@pytest.mark.slow  # 300 training steps
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_reverse_task_is_learned(norm):
    torch.manual_seed(0)
    config = reverse_task_config(d_model=64, d_ff=128, dropout=0.0, norm=norm, attention="sdpa")
    model = train_on_reverse_task(
        Transformer(config),
        steps=300,
        batch_size=64,
        warmup=40,  # linear warm-up, then linear decay to zero
        adam_eps=1e-9,
        min_symbols=3,
        max_symbols=7,
    )

    src, tgt_in, labels = reverse_task_batch(
        256, torch.Generator().manual_seed(2), min_symbols=3, max_symbols=7
    )
    with torch.no_grad():
        logits = model(src, tgt_in)
    held_out_loss = F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=PAD)
    real = labels != PAD
    accuracy = (logits.argmax(-1) == labels)[real].float().mean()
    first_token_accuracy = (logits[:, 0].argmax(-1) == labels[:, 0]).float().mean()
    assert held_out_loss < 0.03, f"{norm}-norm did not learn to reverse: loss {held_out_loss:.3f}"
    assert accuracy > 0.99
    assert first_token_accuracy > 0.99  # the first target token too
