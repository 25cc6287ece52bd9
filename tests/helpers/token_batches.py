"""Batches with chosen numbers of target tokens, a tiny TranslationModule to train on them, and the
gradient an optimizer step over them must apply: the mean over all their target tokens."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader

from transformer_nmt.model import Transformer
from transformer_nmt.training.loss import label_smoothed_loss

from .tiny_model import PAD, tiny_config

BOS, EPSILON = 1, 0.1


def token_batch(n_tokens: int, seed: int, src_vocab_size: int | None = None) -> dict:
    """A batch whose labels hold exactly ``n_tokens`` non-pad targets, in rows of unequal
    lengths (at most 12 per row), padded; sources of 2 to 7 tokens, padded too. Token ids fit
    the tiny model's vocabularies (``src_vocab_size`` replaces the source one)."""
    generator = torch.Generator().manual_seed(seed)
    lengths = []
    while sum(lengths) < n_tokens:
        lengths.append(
            min(int(torch.randint(1, 13, (1,), generator=generator)), n_tokens - sum(lengths))
        )
    rows, width = len(lengths), max(lengths) + 1  # at least one pad column
    config = tiny_config()
    src_vocab_size = src_vocab_size or config.src_vocab_size
    labels = torch.full((rows, width), PAD)
    tgt_in = torch.full((rows, width), PAD)
    src = torch.full((rows, 8), PAD)
    for row, length in enumerate(lengths):
        labels[row, :length] = torch.randint(
            3, config.tgt_vocab_size, (length,), generator=generator
        )
        tgt_in[row, 0] = BOS
        tgt_in[row, 1:length] = labels[row, : length - 1]
        src_length = int(torch.randint(2, 8, (1,), generator=generator))
        src[row, :src_length] = torch.randint(3, src_vocab_size, (src_length,), generator=generator)
    return {"src_ids": src, "tgt_in_ids": tgt_in, "labels": labels}


def tiny_module(**overrides):
    """A TranslationModule of the tiny model without dropout, so gradients are deterministic."""
    from transformer_nmt.training import TranslationModule

    options = dict(
        model_config=tiny_config(dropout=0.0).to_dict(), tokenizer_dir="tok", src_lang="en",
        tgt_lang="de", bos_id=BOS, eos_id=2, pad_id=PAD, label_smoothing=EPSILON,
        scheduler={"name": "noam", "warmup": 10},
    )  # fmt: skip
    return TranslationModule(**{**options, **overrides})


def token_mean_gradients(initial_state: dict, batches: list[dict]) -> dict[str, torch.Tensor]:
    """Gradient of the label-smoothed loss per target token over all ``batches`` together (the
    plain path: logits, then the loss), for the model with ``initial_state`` (``model.*`` keys)."""
    model = Transformer(tiny_config(dropout=0.0))
    model.load_state_dict({k.removeprefix("model."): v for k, v in initial_state.items()})
    total_loss = sum(
        label_smoothed_loss(
            model(b["src_ids"], b["tgt_in_ids"]), b["labels"], PAD, EPSILON
        ).loss_sum
        for b in batches
    )
    tokens = sum(int((b["labels"] != PAD).sum()) for b in batches)
    (total_loss / tokens).backward()
    return {f"model.{name}": p.grad for name, p in model.named_parameters()}


def applied_gradients(module) -> dict[str, torch.Tensor]:
    """The gradients the last optimizer step applied (Lightning zeroes them only when the next
    step's first micro-batch starts)."""
    return {name: p.grad.clone() for name, p in module.named_parameters()}


def fit_one_step(module, batches: list[dict], accumulate: int, **trainer_options) -> pl.Trainer:
    """One optimizer step (or ``max_steps``) of ``module`` over ``batches`` (``accumulate``
    micro-batches per step) on the CPU, without logger or progress bar."""
    options = dict(
        accelerator="cpu", max_steps=1, accumulate_grad_batches=accumulate, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0,
    )  # fmt: skip
    trainer = pl.Trainer(**{**options, **trainer_options})
    trainer.fit(module, train_dataloaders=DataLoader(batches, batch_size=None))
    return trainer
