"""A tiny Transformer trained briefly to reverse its source: its outputs end at varying steps
(some by EOS, some at the length limit) and its beams disagree with greedy search, which makes
search tests meaningful, while an untrained model just repeats one token.
"""

import torch
import torch.nn.functional as F

from transformer_nmt.model import Transformer, TransformerConfig

PAD, BOS, EOS, FIRST_SYMBOL, VOCAB = 0, 1, 2, 3, 13


def reverse_task_batch(batch_size: int, generator: torch.Generator, max_symbols: int = 8):
    """(src, tgt_in, labels): random symbols + EOS, and the symbols reversed; padded."""
    lengths = torch.randint(1, max_symbols + 1, (batch_size,), generator=generator)
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


def half_trained_reverse_model(steps: int = 60, **overrides) -> Transformer:
    """A tiny model after ``steps`` Adam steps on the reverse task (about a second on a CPU)."""
    torch.manual_seed(0)
    fields = dict(
        src_vocab_size=VOCAB,
        tgt_vocab_size=VOCAB,
        share_all_embeddings=True,
        d_model=32,
        n_heads=4,
        n_encoder_layers=2,
        n_decoder_layers=2,
        d_ff=64,
        dropout=0.1,
        max_len=64,
        pad_id=PAD,
    )
    fields.update(overrides)
    model = Transformer(TransformerConfig(**fields))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        src, tgt_in, labels = reverse_task_batch(32, generator)
        loss = F.cross_entropy(model(src, tgt_in).transpose(1, 2), labels, ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()
