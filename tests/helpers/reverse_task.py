"""The reverse task: the source is random symbols + EOS, the target the same symbols reversed.

Small enough to learn in seconds on a CPU, hard enough to need attention, and with varying
lengths, so padding is exercised.
"""

import torch
import torch.nn.functional as F

from transformer_nmt.model import Transformer, TransformerConfig

from .tiny_model import PAD, tiny_config

BOS, EOS, FIRST_SYMBOL, VOCAB = 1, 2, 3, 13


def reverse_task_batch(
    batch_size: int, generator: torch.Generator, min_symbols: int = 1, max_symbols: int = 8
):
    """(src, tgt_in, labels), each [batch_size, longest + 1], padded with PAD."""
    lengths = torch.randint(min_symbols, max_symbols + 1, (batch_size,), generator=generator)
    width = int(lengths.max()) + 1
    src = torch.full((batch_size, width), PAD)
    tgt_in = torch.full((batch_size, width), PAD)
    labels = torch.full((batch_size, width), PAD)
    for row, length in enumerate(lengths.tolist()):
        symbols = torch.randint(FIRST_SYMBOL, VOCAB, (length,), generator=generator)
        src[row, : length + 1] = torch.cat([symbols, torch.tensor([EOS])])
        tgt_in[row, : length + 1] = torch.cat([torch.tensor([BOS]), symbols.flip(0)])
        labels[row, : length + 1] = torch.cat([symbols.flip(0), torch.tensor([EOS])])
    return src, tgt_in, labels


def reverse_task_sources(n: int, seed: int) -> torch.Tensor:
    """``n`` sources of 1 to 8 symbols + EOS, padded: [n, longest + 1]."""
    src, _, _ = reverse_task_batch(n, torch.Generator().manual_seed(seed))
    return src


def reverse_task_config(**overrides) -> TransformerConfig:
    """The tiny model with one vocabulary of the task's VOCAB symbols, shared by all embeddings."""
    shared = dict(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, share_all_embeddings=True)
    return tiny_config(**{**shared, **overrides})


def train_on_reverse_task(
    model: Transformer,
    steps: int,
    *,
    batch_size: int = 32,
    seed: int = 1,
    warmup: int | None = None,
    adam_eps: float = 1e-8,
    **batch_options,
) -> Transformer:
    """``steps`` Adam steps (lr 3e-3, betas 0.9/0.98) on batches drawn from ``seed``; returns the
    model in eval mode. With ``warmup``, the learning rate rises linearly for ``warmup`` steps,
    then falls linearly to zero at ``steps``. ``batch_options`` go to :func:`reverse_task_batch`.
    """
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=adam_eps)
    schedule = None
    if warmup is not None:
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda s: min((s + 1) / warmup, max(0.0, (steps - s) / (steps - warmup)))
        )
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        src, tgt_in, labels = reverse_task_batch(batch_size, generator, **batch_options)
        loss = F.cross_entropy(model(src, tgt_in).transpose(1, 2), labels, ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if schedule is not None:
            schedule.step()
    return model.eval()


def half_trained_reverse_model(steps: int = 60) -> Transformer:
    """The tiny model after ``steps`` Adam steps on the reverse task (about a second on a CPU).

    Its outputs end at varying steps (some by EOS, some at the length limit) and its beams
    disagree with greedy search, which makes search tests meaningful, while an untrained model
    just repeats one token.
    """
    torch.manual_seed(0)
    return train_on_reverse_task(Transformer(reverse_task_config()), steps)
