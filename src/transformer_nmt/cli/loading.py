"""Shared by the translating commands: device, checkpoint, translator, logs on stderr."""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf

from transformer_nmt.checkpoint import LoadedCheckpoint, load_checkpoint
from transformer_nmt.decoding import SearchOptions, largest_beam_size
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
    model: str  # the checkpoint, or the CTranslate2 directory
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
    if not cfg.get("ckpt_path"):
        raise UsageError(
            "say which model to use: ckpt_path=path/to.ckpt, or engine=ct2 model_dir=<a directory "
            "written by python export.py format=ct2>"
        )
    tokenizer_dir = cfg.get("tokenizer_dir")
    if tokenizer_dir and Path(to_absolute_path(tokenizer_dir)).exists():
        tokenizer_dir = to_absolute_path(tokenizer_dir)
    device = device or resolve_device(cfg.device)
    return load_checkpoint(to_absolute_path(cfg.ckpt_path), device, tokenizer_dir)


def search_options(cfg: DictConfig) -> SearchOptions:
    """The command's ``search`` node as :class:`SearchOptions`, checked."""
    try:
        return OmegaConf.to_object(cfg.search)
    except ValueError as error:
        raise UsageError(f"search: {error}") from error


def check_beam_size(options: SearchOptions, model: Transformer, bos_id: int, eos_id: int) -> None:
    """A ``search.beam_size`` the model's target vocabulary cannot take is a usage error, found
    before any decoding (or training) starts."""
    largest = largest_beam_size(model, bos_id, eos_id)
    if options.beam_size > largest:
        raise UsageError(
            f"search.beam_size={options.beam_size} is too large for this model's "
            f"{model.config.tgt_vocab_size}-token target vocabulary: beam search ranks "
            f"2·beam_size continuations per step; use at most {largest}"
        )


def load_translator(cfg: DictConfig) -> LoadedTranslator:
    """The translator ``cfg.engine`` names: ``torch`` decodes a checkpoint (``ckpt_path``) with
    our search, ``ct2`` a CTranslate2 export (``model_dir``); both with the ``search`` options."""
    engine, model_dir = cfg.get("engine", "torch"), cfg.get("model_dir")
    device = resolve_device(cfg.device)
    if engine == "torch":
        if model_dir:
            raise UsageError(
                f"model_dir={model_dir} is a CTranslate2 export; add engine=ct2 to translate "
                f"with it, or give a checkpoint with ckpt_path=… instead"
            )
        checkpoint = load_from_config(cfg)
        options = search_options(cfg)
        check_beam_size(options, checkpoint.model, checkpoint.bos_id, checkpoint.eos_id)
        translator = Translator.from_checkpoint(checkpoint, options)
        return LoadedTranslator(
            translator, checkpoint.src_lang, checkpoint.tgt_lang, str(checkpoint.path), device
        )
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
