"""Shared by the translating commands: device, checkpoint, translator, logs on stderr."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, ListConfig, OmegaConf

from transformer_nmt.checkpoint import LoadedCheckpoint, load_checkpoint
from transformer_nmt.decoding import Ensemble, SearchOptions, largest_beam_size
from transformer_nmt.evaluation import TextTranslator, Translator
from transformer_nmt.model import Transformer

from .errors import UsageError

ENGINES = ("torch", "ct2")


@dataclass(frozen=True)
class LoadedTranslator:
    """What a translating command decodes with, and what it reports about it."""

    translator: TextTranslator
    src_lang: str
    tgt_lang: str
    model: str  # the checkpoint (an ensemble's joined by " + "), or the CTranslate2 directory
    device: str


def log_to_stderr() -> None:
    """Send log records to stderr (for commands whose stdout carries the results)."""
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="[%(levelname)s] %(name)s: %(message)s"
    )


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` if a GPU is visible, else ``cpu``; anything else unchanged (``cuda``
    only where CUDA is available)."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(
            f"device={device}, but this PyTorch ({torch.__version__}) sees no CUDA GPU; use "
            f"device=cpu, or device=auto to take a GPU where there is one"
        )
    return device


def load_from_config(cfg: DictConfig, device: str | None = None) -> LoadedCheckpoint:
    """The checkpoint named by ``cfg.ckpt_path`` (``cfg.tokenizer_dir`` overrides its tokenizer),
    on ``device`` (default: ``cfg.device``)."""
    paths = checkpoint_paths(cfg)
    if len(paths) > 1:
        raise UsageError(
            f"ckpt_path names {len(paths)} checkpoints; this command takes one (an ensemble is "
            f"for translate.py and evaluate.py; average_checkpoints.py merges checkpoints of "
            f"one run into one)"
        )
    return _load(cfg, paths[0], device)


def load_all_from_config(cfg: DictConfig, device: str | None = None) -> list[LoadedCheckpoint]:
    """Every checkpoint ``cfg.ckpt_path`` names: one path, or a list of them (an ensemble)."""
    return [_load(cfg, path, device) for path in checkpoint_paths(cfg)]


def checkpoint_paths(cfg: DictConfig) -> list[str]:
    """``cfg.ckpt_path`` as a list of paths, refused with a usage error if missing or empty."""
    value = cfg.get("ckpt_path")
    paths = list(value) if isinstance(value, ListConfig | list | tuple) else [value]
    if not paths or not all(paths):
        raise UsageError(
            "say which model to use: ckpt_path=path/to.ckpt (or an ensemble, "
            "ckpt_path=[a.ckpt,b.ckpt]), or engine=ct2 model_dir=<a directory written by "
            "python export.py format=ct2>"
        )
    return [str(path) for path in paths]


def _load(cfg: DictConfig, path: str, device: str | None) -> LoadedCheckpoint:
    tokenizer_dir = cfg.get("tokenizer_dir")
    if tokenizer_dir and Path(to_absolute_path(tokenizer_dir)).exists():
        tokenizer_dir = to_absolute_path(tokenizer_dir)
    device = device or resolve_device(cfg.device)
    return load_checkpoint(to_absolute_path(path), device, tokenizer_dir)


def search_options(cfg: DictConfig) -> SearchOptions:
    """The command's ``search`` node as :class:`SearchOptions`, checked."""
    try:
        return OmegaConf.to_object(cfg.search)
    except ValueError as error:
        raise UsageError(f"search: {error}") from error


def check_beam_size(
    options: SearchOptions, model: Transformer | Sequence[Transformer], bos_id: int, eos_id: int
) -> None:
    """A ``search.beam_size`` the model's target vocabulary cannot take is a usage error, found
    before any decoding (or training) starts."""
    largest = largest_beam_size(model, bos_id, eos_id)
    if options.beam_size > largest:
        raise UsageError(
            f"search.beam_size={options.beam_size} is too large for this model's "
            f"{Ensemble.of(model).tgt_vocab_size}-token target vocabulary: beam search ranks "
            f"2·beam_size continuations per step; use at most {largest}"
        )


def load_translator(cfg: DictConfig) -> LoadedTranslator:
    """The translator ``cfg.engine`` names: ``torch`` decodes a checkpoint (``ckpt_path``; a
    list of them is an ensemble) with our search, ``ct2`` a CTranslate2 export (``model_dir``);
    both with the ``search`` options."""
    engine, model_dir = cfg.get("engine", "torch"), cfg.get("model_dir")
    device = resolve_device(cfg.device)
    if engine == "torch":
        if model_dir:
            raise UsageError(
                f"model_dir={model_dir} is a CTranslate2 export; add engine=ct2 to translate "
                f"with it, or give a checkpoint with ckpt_path=… instead"
            )
        options = search_options(cfg)
        checkpoints = load_all_from_config(cfg)
        first = checkpoints[0]
        translator = Translator.from_checkpoints(checkpoints, options)
        check_beam_size(options, translator.model, first.bos_id, first.eos_id)
        model = " + ".join(str(checkpoint.path) for checkpoint in checkpoints)
        return LoadedTranslator(translator, first.src_lang, first.tgt_lang, model, device)
    if engine == "ct2":
        if not model_dir or cfg.get("ckpt_path"):
            raise UsageError(
                "engine=ct2 translates with a CTranslate2 export: give model_dir=<a directory "
                "written by python export.py format=ct2> and no ckpt_path"
            )
        from transformer_nmt.evaluation import CTranslate2Translator

        translator = CTranslate2Translator(
            to_absolute_path(model_dir), search_options(cfg), device=device
        )
        return LoadedTranslator(
            translator, translator.src_lang, translator.tgt_lang, str(translator.model_dir), device
        )
    raise UsageError(f"engine must be one of {', '.join(ENGINES)}; got {engine!r}")
