"""The reverse task: the source is random symbols + EOS, the target the same symbols reversed.

Small enough to learn in seconds on a CPU, hard enough to need attention, and with varying
lengths, so padding is exercised.
"""

import torch

PAD, BOS, EOS, FIRST_SYMBOL, VOCAB = 0, 1, 2, 3, 13


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
