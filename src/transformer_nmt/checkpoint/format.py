"""The checkpoint file: what it holds, writing it (atomically, never with a non-finite weight)
and reading it back."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO
from omegaconf import DictConfig, ListConfig, OmegaConf

from transformer_nmt.atomic import remove_stale_temporaries, write_file_atomically
from transformer_nmt.model import TransformerConfig

REQUIRED_HYPER_PARAMETERS = (
    "model_config",
    "tokenizer_dir",
    "src_lang",
    "tgt_lang",
    "bos_id",
    "eos_id",
    "pad_id",
)
MODEL_PREFIX = "model."
TOKENIZER_FILES_KEY = "tokenizer_files"  # {file name: bytes}
TOKENIZER_IDENTITY_KEY = "tokenizer_identity"  # a hyper-parameter; None if not given at training
_COMPILED_PREFIX = "_orig_mod."  # torch.compile wraps the model; its keys gain this prefix
TRAIN_HINT = "expected a .ckpt written by this project's train.py"


class CheckpointError(ValueError):
    """A checkpoint (or the tokenizer it names) cannot be used; the message says why and how."""


# -- writing -----------------------------------------------------------------------------------


def embed_tokenizer_files(checkpoint: dict[str, Any], files: Mapping[str, bytes] | None) -> None:
    """Store a tokenizer's files (:func:`~transformer_nmt.data.tokenizer_files`) in it."""
    if files:
        checkpoint[TOKENIZER_FILES_KEY] = dict(files)


def save_checkpoint(checkpoint: Mapping[str, Any], path: Path | str) -> Path:
    """``torch.save`` a checkpoint dict to ``path`` atomically; returns the path. Refuses (with a
    :class:`CheckpointError`, writing nothing) a ``state_dict`` with a non-finite weight."""
    check_finite_weights(checkpoint, path)
    size = sum(t.nbytes for t in _tensors(checkpoint))  # for a full disk's message
    path = write_file_atomically(
        path, lambda handle: torch.save(checkpoint, handle), binary=True, size=size
    )
    remove_stale_temporaries(path)
    return path


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    """The tensors in a nest of dicts, lists and tuples."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _tensors(item)


def check_finite_weights(checkpoint: Mapping[str, Any], path: Path | str) -> None:
    """Raise :class:`CheckpointError` if a floating-point tensor of ``checkpoint["state_dict"]``
    holds a NaN or an infinity: a checkpoint to resume from must not hold a diverged model."""
    state_dict = checkpoint.get("state_dict") or {}
    bad = [
        key
        for key, value in state_dict.items()
        if isinstance(value, torch.Tensor)
        and value.is_floating_point()
        and not bool(torch.isfinite(value).all())
    ]
    if bad:
        raise CheckpointError(
            f"refusing to write {path}: {len(bad)} weight tensor(s) hold NaN or infinite values "
            f"({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''}); the file there, if any, "
            f"is left as it was. Training diverged: resume from the last good checkpoint with a "
            f"lower learning rate"
        )


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's ``TorchCheckpointIO`` with local saves through :func:`save_checkpoint`.

    Lightning 2.6 saves through an fsspec transaction that writes into the *system* temp
    directory and commits with ``shutil.move``: an atomic rename only when that directory shares
    the checkpoint's filesystem, a copy (and a truncated ``last.ckpt`` if killed) otherwise, and
    nothing is fsynced. Remote URLs keep Lightning's own path. A checkpoint with a non-finite
    weight is never written (:func:`check_finite_weights`), local or remote.
    """

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | os.PathLike, storage_options: Any = None
    ) -> None:
        if "://" in str(path):
            check_finite_weights(checkpoint, path)
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO.save_checkpoint takes no storage_options")
        save_checkpoint(checkpoint, path)


# -- reading ------------------------------------------------------------------------------------


def read_checkpoint(path: Path | str, *, mmap: bool = False) -> dict:
    """``torch.load`` a checkpoint onto the CPU and check it follows this project's layout.

    ``mmap=True`` maps the tensors instead of reading them: cheap when only the
    hyper-parameters are needed.
    """
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist; {TRAIN_HINT}")
    if path.is_dir():
        raise CheckpointError(f"checkpoint {path} is a directory; {TRAIN_HINT}")
    try:
        checkpoint = _torch_load(path, mmap)
    except Exception as error:  # any unpickling failure means: not a torch checkpoint
        raise CheckpointError(
            f"{path} is not a PyTorch checkpoint ({type(error).__name__}: {error}); {TRAIN_HINT}"
        ) from error
    if not isinstance(checkpoint, Mapping):
        raise CheckpointError(
            f"{path} holds a {type(checkpoint).__name__}, not a checkpoint dict; {TRAIN_HINT}"
        )
    hyper_parameters = checkpoint.get("hyper_parameters")
    state_dict = checkpoint.get("state_dict")
    if not isinstance(hyper_parameters, Mapping) or not isinstance(state_dict, Mapping):
        raise CheckpointError(
            f"{path} is not a transformer-nmt checkpoint: it lacks 'hyper_parameters' and/or "
            f"'state_dict' (top-level keys: {sorted(map(str, checkpoint))[:10]}); a plain "
            f"state_dict or another project's checkpoint cannot be used; {TRAIN_HINT}"
        )
    missing = [key for key in REQUIRED_HYPER_PARAMETERS if key not in hyper_parameters]
    if missing:
        raise CheckpointError(
            f"{path} is not a transformer-nmt checkpoint: its hyper_parameters lack {missing}; "
            f"{TRAIN_HINT}"
        )
    if not any(key.startswith(MODEL_PREFIX) for key in state_dict):
        raise CheckpointError(
            f"{path} has no Transformer weights (no state_dict key starts with "
            f"{MODEL_PREFIX!r}); {TRAIN_HINT}"
        )
    checkpoint = dict(checkpoint)
    checkpoint["hyper_parameters"] = _plain(hyper_parameters)
    return checkpoint


def _torch_load(path: Path, mmap: bool):
    if mmap:
        try:
            return torch.load(path, map_location="cpu", weights_only=False, mmap=True)
        except RuntimeError:  # a file in torch's legacy (non-zip) format cannot be mapped
            pass
    return torch.load(path, map_location="cpu", weights_only=False)


def model_state_dict(checkpoint: Mapping) -> dict[str, torch.Tensor]:
    """The Transformer's parameters of a checkpoint, keyed as in ``Transformer.state_dict()``."""
    state = {}
    for key, value in checkpoint["state_dict"].items():
        if key.startswith(MODEL_PREFIX):
            state[key[len(MODEL_PREFIX) :].replace(_COMPILED_PREFIX, "")] = value
    return state


def model_config(checkpoint: Mapping, path: Path | str = "checkpoint") -> TransformerConfig:
    """The checkpoint's :class:`TransformerConfig`, with a clear error if it is not valid."""
    try:
        return TransformerConfig(**checkpoint["hyper_parameters"]["model_config"])
    except (TypeError, ValueError) as error:
        raise CheckpointError(
            f"{path} has an unusable model_config ({error}); it was written by an "
            f"incompatible version of this project"
        ) from error


def _plain(value):
    """Hyper-parameters as plain dicts/lists (they may be OmegaConf or AttributeDict objects)."""
    if isinstance(value, DictConfig | ListConfig):
        return OmegaConf.to_container(value, resolve=True)
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value
