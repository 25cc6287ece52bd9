"""What ``evaluate.py``, ``translate.py`` and ``average_checkpoints.py`` do, given their
Hydra config (``conf/evaluate.yaml``, ``conf/translate.yaml``, ``conf/average.yaml``).
"""

from __future__ import annotations

import itertools
import json
import logging
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TextIO

import torch
from hydra.utils import instantiate, to_absolute_path
from omegaconf import DictConfig, MissingMandatoryValue

from transformer_nmt.data import DataError
from transformer_nmt.data.sources import LOGICAL_SPLITS

from .atomic_files import write_text_atomically
from .checkpoint import (
    CheckpointError,
    LoadedCheckpoint,
    average_checkpoints,
    last_checkpoints,
    load_checkpoint,
)
from .metrics import corpus_scores
from .translator import Translator

log = logging.getLogger(__name__)


class UsageError(ValueError):
    """A command-line option is missing or invalid; the message says which and how to fix it."""


USER_ERRORS = (CheckpointError, DataError, UsageError, MissingMandatoryValue)


def exit_on_user_error(command: Callable[[DictConfig], object], cfg: DictConfig) -> None:
    """Run ``command(cfg)``; a problem the user can fix prints one ``error: …`` line to stderr
    and exits with status 1 instead of a traceback.
    """
    try:
        command(cfg)
    except USER_ERRORS as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)


def log_to_stderr() -> None:
    """Send log records to stderr (for commands whose stdout carries the results)."""
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="[%(levelname)s] %(name)s: %(message)s"
    )


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` if a GPU is visible, else ``cpu``; anything else unchanged."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def load_from_config(cfg: DictConfig) -> LoadedCheckpoint:
    """The checkpoint named by ``cfg.ckpt_path`` (``cfg.tokenizer_dir`` overrides its tokenizer)."""
    tokenizer_dir = cfg.get("tokenizer_dir")
    if tokenizer_dir and Path(to_absolute_path(tokenizer_dir)).exists():
        tokenizer_dir = to_absolute_path(tokenizer_dir)
    return load_checkpoint(
        to_absolute_path(cfg.ckpt_path), resolve_device(cfg.device), tokenizer_dir
    )


def translator_from_config(cfg: DictConfig, checkpoint: LoadedCheckpoint) -> Translator:
    if cfg.beam_size < 1 or cfg.batch_size < 1:
        raise UsageError(
            f"beam_size and batch_size must be positive, got beam_size={cfg.beam_size} "
            f"batch_size={cfg.batch_size}"
        )
    return Translator.from_checkpoint(
        checkpoint,
        beam_size=cfg.beam_size,
        length_penalty=cfg.length_penalty,
        max_len_a=cfg.max_len_a,
        max_len_b=cfg.max_len_b,
        batch_size=cfg.batch_size,
    )


# -- evaluate ----------------------------------------------------------------------------------


def evaluate_command(cfg: DictConfig) -> dict:
    """Translate one split, print BLEU and chrF with signatures, write hypotheses and scores."""
    if cfg.split not in LOGICAL_SPLITS:
        raise UsageError(f"split must be one of {list(LOGICAL_SPLITS)}, got {cfg.split!r}")
    if cfg.max_sentences is not None and cfg.max_sentences < 1:
        raise UsageError(f"max_sentences must be positive or null, got {cfg.max_sentences}")
    checkpoint = load_from_config(cfg)
    translator = translator_from_config(cfg, checkpoint)
    pairs = _datamodule_in_checkpoint_direction(cfg.data, checkpoint).raw_pairs(cfg.split)
    if cfg.max_sentences is not None:
        pairs = pairs[: cfg.max_sentences]
    if not pairs:
        raise UsageError(f"split {cfg.split!r} of the data config holds no sentences")
    started = time.perf_counter()
    hypotheses = translator.translate([src for src, _ in pairs])
    seconds = time.perf_counter() - started
    scores = corpus_scores(hypotheses, [tgt for _, tgt in pairs])
    print(scores.bleu_report)
    print(scores.chrf_report)

    output_dir = Path(cfg.output_dir)
    hypotheses_path = output_dir / f"hyps.{cfg.split}.txt"
    write_text_atomically(hypotheses_path, "".join(f"{h}\n" for h in hypotheses))
    report = {
        "bleu": scores.bleu,
        "chrf": scores.chrf,
        "bleu_signature": scores.bleu_signature,
        "chrf_signature": scores.chrf_signature,
        "bleu_details": scores.bleu_details,
        "chrf_details": scores.chrf_details,
        "split": cfg.split,
        "n_sentences": len(pairs),
        "src_lang": checkpoint.src_lang,
        "tgt_lang": checkpoint.tgt_lang,
        "ckpt": str(checkpoint.path),
        "beam_size": cfg.beam_size,
        "length_penalty": cfg.length_penalty,
        "max_len_a": cfg.max_len_a,
        "max_len_b": cfg.max_len_b,
        "batch_size": cfg.batch_size,
        "device": str(next(checkpoint.model.parameters()).device),
        "decode_seconds": round(seconds, 3),
        "hypotheses_file": str(hypotheses_path),
    }
    scores_path = output_dir / f"scores.{cfg.split}.json"
    write_text_atomically(scores_path, json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    log.info("wrote %s and %s (%.1fs decoding)", hypotheses_path, scores_path, seconds)
    return report


def _datamodule_in_checkpoint_direction(data_cfg: DictConfig, checkpoint: LoadedCheckpoint):
    """The data config's datamodule, reading pairs in the direction the checkpoint translates.

    Only its raw sentences are used: the tokenizer always comes from the checkpoint.
    """
    direction = (checkpoint.src_lang, checkpoint.tgt_lang)
    configured = (data_cfg.get("src_lang"), data_cfg.get("tgt_lang"))
    if configured != direction:
        log.warning(
            "the checkpoint translates %s→%s; reading the data in that direction (the data "
            "config says %s→%s)",
            *direction,
            *configured,
        )
    return instantiate(data_cfg, src_lang=checkpoint.src_lang, tgt_lang=checkpoint.tgt_lang)


# -- translate ---------------------------------------------------------------------------------


def translate_command(cfg: DictConfig) -> None:
    """stdin → stdout, one line in, one line out; an interactive prompt on a terminal."""
    log_to_stderr()
    translator = translator_from_config(cfg, load_from_config(cfg))
    for stream in (sys.stdin, sys.stdout):
        if hasattr(stream, "reconfigure"):  # UTF-8 whatever the locale; split on \n only
            stream.reconfigure(encoding="utf-8", newline="\n")
    if sys.stdin.isatty():
        translate_interactively(translator, sys.stdin, sys.stdout, sys.stderr)
    else:
        translate_stream(translator, sys.stdin, sys.stdout, cfg.chunk_lines)


def translate_stream(
    translator: Translator, lines: Iterable[str], output: TextIO, chunk_lines: int = 1000
) -> int:
    """Translate ``lines`` in chunks of ``chunk_lines`` (each sorted by length internally),
    writing one line per input line to ``output``; returns the number of lines.
    """
    lines = iter(lines)
    done = 0
    while chunk := list(itertools.islice(lines, chunk_lines)):
        for translation in translator.translate(chunk, first_line_number=done + 1):
            output.write(translation + "\n")
        output.flush()
        done += len(chunk)
    return done


def translate_interactively(
    translator: Translator, lines: TextIO, output: TextIO, prompt_to: TextIO
) -> None:
    """Prompt ``> `` on ``prompt_to``, translate each line typed, until end of input."""
    while True:
        prompt_to.write("> ")
        prompt_to.flush()
        try:
            line = lines.readline()
        except KeyboardInterrupt:
            break
        if not line:
            break
        output.write(translator.translate([line])[0] + "\n")
        output.flush()
    prompt_to.write("\n")


# -- average -----------------------------------------------------------------------------------


def average_command(cfg: DictConfig) -> Path:
    """Average ``inputs`` (or the ``last_n`` newest checkpoints of ``dir``) into ``output``."""
    log_to_stderr()
    if cfg.inputs:
        paths = [Path(to_absolute_path(str(p))) for p in cfg.inputs]
    elif cfg.dir and cfg.last_n:
        paths = last_checkpoints(to_absolute_path(cfg.dir), int(cfg.last_n))
    else:
        raise UsageError(
            "say which checkpoints to average: inputs='[a.ckpt,b.ckpt]', or dir=path/to/"
            "checkpoints last_n=5"
        )
    output = average_checkpoints(paths, to_absolute_path(cfg.output))
    log.info("averaged %s", ", ".join(p.name for p in paths))
    print(output)
    return output
