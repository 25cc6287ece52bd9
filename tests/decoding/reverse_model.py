"""A tiny Transformer trained briefly to reverse its source: its outputs end at varying steps
(some by EOS, some at the length limit) and its beams disagree with greedy search, which makes
search tests meaningful, while an untrained model just repeats one token.
"""

import torch
import torch.nn.functional as F

from transformer_nmt.model import Transformer

from ..model.tiny_model import tiny_config
from ..reverse_task import PAD, VOCAB, reverse_task_batch


def half_trained_reverse_model(steps: int = 60, **overrides) -> Transformer:
    """A tiny model after ``steps`` Adam steps on the reverse task (about a second on a CPU)."""
    torch.manual_seed(0)
    fields = dict(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, share_all_embeddings=True)
    fields.update(overrides)
    model = Transformer(tiny_config(**fields))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        src, tgt_in, labels = reverse_task_batch(32, generator)
        loss = F.cross_entropy(model(src, tgt_in).transpose(1, 2), labels, ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()
