"""A tiny model trained for a few seconds on the toy corpus, saved in this project's checkpoint
format and loaded back with ``load_checkpoint``: what the export tests compare exports with.

A hundred-odd Adam steps give outputs that end by EOS at varying steps and are partly wrong, so
that greedy and beam search disagree on some sentences and token-for-token comparisons mean
something; an untrained model just repeats one token.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from transformer_nmt.checkpoint import LoadedCheckpoint, load_checkpoint
from transformer_nmt.data import PadCollator, load_tokenizer
from transformer_nmt.data.encoding import encode_texts
from transformer_nmt.model import Transformer

from .corpus import make_pairs
from .tiny_checkpoint import write_checkpoint, write_tokenizer
from .tiny_model import tiny_config

VAL_SENTENCES = 120


@dataclass
class ToyCheckpoint:
    """A loaded checkpoint and the English sentences to translate with it."""

    checkpoint: LoadedCheckpoint
    val_texts: list[str]


def train_toy_checkpoint(
    directory: Path, norm: str = "post", steps: int = 150, **overrides
) -> ToyCheckpoint:
    """Train a tiny ``norm`` model ``steps`` Adam steps on 400 toy pairs (a few seconds), write
    ``directory/toy.ckpt`` with its BPE tokenizer, and load it. ``overrides`` change the model."""
    pairs = make_pairs(400, seed=1)
    tokenizer_dir = write_tokenizer(directory / "tokenizer", pairs)
    tokenizer = load_tokenizer(str(tokenizer_dir))
    torch.manual_seed(0)
    fields = dict(
        src_vocab_size=len(tokenizer),
        tgt_vocab_size=len(tokenizer),
        share_all_embeddings=True,
        pad_id=tokenizer.pad_token_id,
        norm=norm,
    )
    model = Transformer(tiny_config(**{**fields, **overrides}))
    examples = [
        (i, np.array(src), np.array(tgt))
        for i, (src, tgt) in enumerate(
            zip(
                encode_texts(tokenizer, [en for en, _ in pairs]),
                encode_texts(tokenizer, [de for _, de in pairs], target=True),
                strict=True,
            )
        )
    ]
    collate = PadCollator(tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    rng = random.Random(0)
    model.train()
    for _ in range(steps):
        batch = collate(rng.sample(examples, 32))
        logits = model(batch["src_ids"], batch["tgt_in_ids"])
        loss = F.cross_entropy(
            logits.transpose(1, 2), batch["labels"], ignore_index=tokenizer.pad_token_id
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    path = write_checkpoint(directory / "toy.ckpt", model.eval(), tokenizer_dir)
    val_texts = [en for en, _ in make_pairs(VAL_SENTENCES, seed=2)]
    return ToyCheckpoint(load_checkpoint(path), val_texts)


def pad_rows(rows: list[list[int]], pad_id: int) -> torch.Tensor:
    """Id lists as one [len(rows), longest] batch, padded with ``pad_id``."""
    batch = torch.full((len(rows), max(map(len, rows))), pad_id, dtype=torch.long)
    for i, row in enumerate(rows):
        batch[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return batch
