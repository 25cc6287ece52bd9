"""Both norm placements must actually learn: a real (small) training run, not a smoke test."""

import pytest
import torch
import torch.nn.functional as F

from transformer_nmt.model import Transformer

from ..reverse_task import PAD, VOCAB, reverse_task_batch
from .tiny_model import tiny_config


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_reverse_task_is_learned(norm):
    torch.manual_seed(0)
    config = tiny_config(
        src_vocab_size=VOCAB,
        tgt_vocab_size=VOCAB,
        share_all_embeddings=True,
        d_model=64,
        d_ff=128,
        dropout=0.0,
        norm=norm,
        attention="sdpa",
    )
    model = Transformer(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
    steps, warmup = 300, 40  # linear warm-up, then linear decay to zero
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (steps - s) / (steps - warmup)))
    )
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        src, tgt_in, labels = reverse_task_batch(64, generator, min_symbols=3, max_symbols=7)
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()

    model.eval()
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
    assert first_token_accuracy > 0.99  # the first target token is learned (seed 001's bug)
