"""Shared by the translating commands: device, checkpoint, translator, logs on stderr."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import torch
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf

from transformer_nmt.checkpoint import LoadedCheckpoint, load_checkpoint
from transformer_nmt.decoding import SearchOptions
from transformer_nmt.evaluation import Translator

from .errors import UsageError


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


def search_options(cfg: DictConfig) -> SearchOptions:
    """The command's ``search`` node as :class:`SearchOptions`, checked."""
    try:
        return OmegaConf.to_object(cfg.search)
    except ValueError as error:
        raise UsageError(f"search: {error}") from error


def translator_from_config(cfg: DictConfig, checkpoint: LoadedCheckpoint) -> Translator:
    """A translator of the checkpoint's model and tokenizer with the command's search options."""
    return Translator.from_checkpoint(checkpoint, search_options(cfg))
