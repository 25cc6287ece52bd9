"""Attention maps of a few fixed validation sentences after every validation: what attention
learns, step by step, in W&B, TensorBoard and the run directory."""

from __future__ import annotations

import logging
import multiprocessing
import time
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

from transformer_nmt.evaluation.attention import (
    KINDS,
    SentenceMaps,
    attention_for_pair,
    record_attention,
)
from transformer_nmt.private_api import tensorboard_file_writer

log = logging.getLogger(__name__)

# Sentences longer than this (tokens, with EOS or BOS) are not chosen: their labels would not read.
MAX_TOKENS = 40


@dataclass
class Sentence:
    """One chosen validation pair: source ids + EOS, decoder input BOS + ids, and their tokens."""

    src_ids: torch.Tensor
    tgt_in_ids: torch.Tensor
    src_tokens: list[str]
    tgt_tokens: list[str]


class AttentionMaps(Callback):
    """After each validation, teacher-forces ``num_sentences`` validation pairs (chosen once by
    source length, from short to long) through the model and draws, per sentence and kind, the
    map of every layer averaged over heads (``<kind>_mean``) and every head of the last layer
    (``<kind>_heads``), the tokens on the axes.

    Each image goes to W&B (``attention/sentence_<i>/<kind>_mean``, at the validation's global
    step: the step slider shows it evolve), to TensorBoard (Images) and to
    ``<dirpath>/step_<step>/sentence_<i>_<kind>_<mean|heads>.png``; ``<dirpath>/maps.npz`` holds
    the latest maps themselves (``load_attention_maps`` reads them; ``report.py`` draws them).
    ``kinds``: any of ``cross``, ``encoder_self``, ``decoder_self``. Rank 0 alone works, with
    the uncompiled model (``pl_module.model``) and, under EMA, the averaged weights validation
    used.

    Validation waits only for the teacher-forced forward passes: drawing and writing (matplotlib,
    about half a second per sentence on a CPU) run in one drawing process (:func:`draw`), and
    the images are logged as soon as they are drawn (checked after every training batch), at the
    latest when fit or validate ends.
    """

    def __init__(
        self, dirpath: str, num_sentences: int = 2, kinds: Sequence[str] = ("cross",)
    ) -> None:
        unknown = sorted(set(kinds) - set(KINDS))
        if unknown or not kinds:
            raise ValueError(
                f"callbacks.attention_maps.kinds must be a non-empty list of {list(KINDS)}, "
                f"got {list(kinds)}"
            )
        if num_sentences < 1:
            raise ValueError(
                f"callbacks.attention_maps.num_sentences must be >= 1, got {num_sentences}; "
                f"turn the maps off with callbacks.attention_maps=null"
            )
        self.dirpath = Path(dirpath)
        self.num_sentences = num_sentences
        self.kinds = list(kinds)
        self.sentences: list[Sentence] | None = None
        self.last_duration_s: float | None = None  # what the last validation waited for the maps
        self._pending: list[tuple[int, Future]] = []  # (step, its drawing)

    def on_validation_batch_end(
        self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0
    ) -> None:
        """After rank 0's last validation batch: the weights validation used are still in place
        (an EMA callback swaps the trained ones back at the epoch's end, before or after this
        callback's own epoch-end hook, depending on their order)."""
        if dataloader_idx == 0 and batch_idx == trainer.num_val_batches[0] - 1:
            self.record(trainer, pl_module)

    def record(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Teacher-force the sentences and hand their maps to the drawing process."""
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        started = time.perf_counter()
        if self.sentences is None:
            self.sentences = choose_sentences(trainer, self.num_sentences)
        device, maps = pl_module.device, []
        for sentence in self.sentences:
            src_ids, tgt_in_ids = sentence.src_ids.to(device), sentence.tgt_in_ids.to(device)
            weights = attention_for_pair(pl_module.model, src_ids, tgt_in_ids, self.kinds)
            maps.append(
                SentenceMaps(
                    sentence.src_tokens,
                    sentence.tgt_tokens,
                    {kind: w.numpy() for kind, w in weights.items()},
                )
            )
        step = trainer.global_step
        self._pending.append((step, draw(record_attention, self.dirpath, step, maps)))
        self.last_duration_s = time.perf_counter() - started

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._pending:
            self.log_drawn(trainer)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Wait for the last drawings and log them before the loggers close."""
        self.log_drawn(trainer, wait=True)

    def log_drawn(self, trainer: pl.Trainer, wait: bool = False) -> None:
        """Log every finished drawing (every pending one with ``wait``) to W&B and TensorBoard."""
        still_drawing = []
        for step, drawing in self._pending:
            if not (wait or drawing.done()):
                still_drawing.append((step, drawing))
                continue
            try:
                images = drawing.result()
            except Exception:  # a plot must not end a run: say so, and train on
                log.warning("the attention maps of step %d were not drawn", step, exc_info=True)
                continue
            for name, path, png, height, width in images:
                log_image(trainer, f"attention/{name}", step, path, png, (height, width))
        self._pending = still_drawing


_drawer: ProcessPoolExecutor | None = None


def draw(function, *args) -> Future:
    """Run ``function(*args)`` in this process's drawing process, started on first use and kept
    for the next run (the jobs of a sweep share it; it ends with this process)."""
    global _drawer
    if _drawer is None:
        spawn = multiprocessing.get_context("spawn")  # no fork of a process with threads
        _drawer = ProcessPoolExecutor(max_workers=1, mp_context=spawn)
    try:
        return _drawer.submit(function, *args)
    except BrokenProcessPool:  # the drawing process died (killed, out of memory): a new one
        _drawer = None
        return draw(function, *args)


def choose_sentences(trainer: pl.Trainer, count: int) -> list[Sentence]:
    """``count`` validation pairs spread from short to long (source length quantiles 0.1 to
    0.9; the middle one for one), none over :data:`MAX_TOKENS` tokens; the same pairs in every
    run on the same data and tokenizer."""
    loader = trainer.val_dataloaders
    loader = loader[0] if isinstance(loader, list | tuple) else loader
    examples = loader.dataset
    lengths = np.maximum(examples.src_lengths, examples.tgt_lengths)
    candidates = np.flatnonzero(lengths <= MAX_TOKENS)
    if len(candidates) == 0:
        candidates = np.arange(len(examples))
    by_length = candidates[np.argsort(examples.src_lengths[candidates], kind="stable")]
    quantiles = [0.5] if count == 1 else np.linspace(0.1, 0.9, count)
    chosen = [by_length[round(q * (len(by_length) - 1))] for q in quantiles]
    tokenizer = trainer.datamodule.tokenizer
    sentences = []
    for position in chosen:
        batch = loader.collate_fn([examples[int(position)]])
        src_ids, tgt_in_ids = batch["src_ids"][0], batch["tgt_in_ids"][0]
        sentences.append(
            Sentence(
                src_ids,
                tgt_in_ids,
                tokenizer.convert_ids_to_tokens(src_ids.tolist()),
                tokenizer.convert_ids_to_tokens(tgt_in_ids.tolist()),
            )
        )
    return sentences


def log_image(
    trainer: pl.Trainer, key: str, step: int, path: Path, png: bytes, size: tuple[int, int]
) -> None:
    """To W&B (the PNG file) and TensorBoard (the PNG itself, as an image summary), at ``step``."""
    for logger in trainer.loggers:
        if isinstance(logger, WandbLogger):
            logger.log_image(key=key, images=[str(path)], step=step)
        elif isinstance(logger, TensorBoardLogger):
            from tensorboard.compat.proto.summary_pb2 import Summary

            image = Summary.Image(
                height=size[0], width=size[1], colorspace=3, encoded_image_string=png
            )
            summary = Summary(value=[Summary.Value(tag=key, image=image)])
            tensorboard_file_writer(logger.experiment).add_summary(summary, step)
