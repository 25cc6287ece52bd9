"""The checkpoint format: what a checkpoint holds, how it is written, read, loaded and averaged.

A checkpoint of this project is a Lightning ``.ckpt`` whose ``hyper_parameters`` hold
``model_config`` (every :class:`~transformer_nmt.model.TransformerConfig` field),
``tokenizer_dir`` (for :func:`~transformer_nmt.data.load_tokenizer`), ``src_lang``,
``tgt_lang``, ``bos_id``, ``eos_id`` and ``pad_id``; whose ``state_dict`` holds the
Transformer's parameters under the prefix ``model.``; and whose ``tokenizer_files`` entry holds
the tokenizer's files, so that it works where the tokenizer cache does not exist. It is read with
plain ``torch.load`` (pickle: load only checkpoints you trust), without the LightningModule.

Every checkpoint file is written atomically (:class:`AtomicCheckpointIO`, :func:`save_checkpoint`):
a crash leaves the old file or the new one, never half of one; and never with a NaN or infinite
weight: such a checkpoint is refused, so the file at that path stays the last good one.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO
from omegaconf import DictConfig, ListConfig, OmegaConf

from transformer_nmt.atomic import remove_stale_temporaries, write_file_atomically
from transformer_nmt.data.config import default_cache_dir
from transformer_nmt.model import Transformer, TransformerConfig

log = logging.getLogger(__name__)

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
_COMPILED_PREFIX = "_orig_mod."  # torch.compile wraps the model; its keys gain this prefix
# What an averaged checkpoint keeps besides its state_dict; optimizer and loop states go.
_KEPT_ON_AVERAGING = (
    "epoch",
    "global_step",
    "pytorch-lightning_version",
    "hyper_parameters",
    "hparams_name",
    "datamodule_hyper_parameters",
    "datamodule_hparams_name",
    TOKENIZER_FILES_KEY,
)
_TRAIN_HINT = "expected a .ckpt written by this project's train.py"


class CheckpointError(ValueError):
    """A checkpoint (or the tokenizer it names) cannot be used; the message says why and how."""


@dataclass
class LoadedCheckpoint:
    """A checkpoint ready to translate with: the model (in eval mode) and its tokenizer."""

    path: Path
    model: Transformer
    tokenizer: object
    tokenizer_dir: str
    src_lang: str
    tgt_lang: str
    bos_id: int
    eos_id: int
    pad_id: int
    hyper_parameters: dict


# -- writing -----------------------------------------------------------------------------------


def embed_tokenizer_files(checkpoint: dict[str, Any], files: Mapping[str, bytes] | None) -> None:
    """Store a tokenizer's files in ``checkpoint`` (see :func:`tokenizer_files`)."""
    if files:
        checkpoint[TOKENIZER_FILES_KEY] = dict(files)


def save_checkpoint(checkpoint: Mapping[str, Any], path: Path | str) -> Path:
    """``torch.save`` a checkpoint dict to ``path`` atomically; returns the path. Refuses (with a
    :class:`CheckpointError`, writing nothing) a ``state_dict`` with a non-finite weight."""
    check_finite_weights(checkpoint, path)
    path = write_file_atomically(path, lambda handle: torch.save(checkpoint, handle), binary=True)
    remove_stale_temporaries(path)
    return path


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


def read_checkpoint(path: Path | str) -> dict:
    """``torch.load`` a checkpoint onto the CPU and check it follows this project's layout."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist; {_TRAIN_HINT}")
    if path.is_dir():
        raise CheckpointError(f"checkpoint {path} is a directory; {_TRAIN_HINT}")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # any unpickling failure means: not a torch checkpoint
        raise CheckpointError(
            f"{path} is not a PyTorch checkpoint ({type(error).__name__}: {error}); {_TRAIN_HINT}"
        ) from error
    if not isinstance(checkpoint, Mapping):
        raise CheckpointError(
            f"{path} holds a {type(checkpoint).__name__}, not a checkpoint dict; {_TRAIN_HINT}"
        )
    hyper_parameters = checkpoint.get("hyper_parameters")
    state_dict = checkpoint.get("state_dict")
    if not isinstance(hyper_parameters, Mapping) or not isinstance(state_dict, Mapping):
        raise CheckpointError(
            f"{path} is not a transformer-nmt checkpoint: it lacks 'hyper_parameters' and/or "
            f"'state_dict' (top-level keys: {sorted(map(str, checkpoint))[:10]}); a plain "
            f"state_dict or another project's checkpoint cannot be used; {_TRAIN_HINT}"
        )
    missing = [key for key in REQUIRED_HYPER_PARAMETERS if key not in hyper_parameters]
    if missing:
        raise CheckpointError(
            f"{path} is not a transformer-nmt checkpoint: its hyper_parameters lack {missing}; "
            f"{_TRAIN_HINT}"
        )
    if not any(key.startswith(MODEL_PREFIX) for key in state_dict):
        raise CheckpointError(
            f"{path} has no Transformer weights (no state_dict key starts with "
            f"{MODEL_PREFIX!r}); {_TRAIN_HINT}"
        )
    checkpoint = dict(checkpoint)
    checkpoint["hyper_parameters"] = _plain(hyper_parameters)
    return checkpoint


def model_state_dict(checkpoint: Mapping) -> dict[str, torch.Tensor]:
    """The Transformer's parameters of a checkpoint, keyed as in ``Transformer.state_dict()``."""
    state = {}
    for key, value in checkpoint["state_dict"].items():
        if key.startswith(MODEL_PREFIX):
            state[key[len(MODEL_PREFIX) :].replace(_COMPILED_PREFIX, "")] = value
    return state


def model_config(checkpoint: Mapping, path: Path | str = "checkpoint") -> TransformerConfig:
    """The checkpoint's :class:`TransformerConfig`, with a clear error if it is not valid."""
    options = dict(checkpoint["hyper_parameters"]["model_config"])
    if "d_head" in options:  # older checkpoints: one d_head for d_k and d_v
        options["d_k"] = options["d_v"] = options.pop("d_head")
    try:
        return TransformerConfig(**options)
    except (TypeError, ValueError) as error:
        raise CheckpointError(
            f"{path} has an unusable model_config ({error}); it was written by an "
            f"incompatible version of this project"
        ) from error


def load_checkpoint(
    path: Path | str, device: str | torch.device = "cpu", tokenizer_dir: str | None = None
) -> LoadedCheckpoint:
    """Model (eval mode, on ``device``) and tokenizer of a checkpoint, checked to match.

    ``tokenizer_dir`` overrides where the tokenizer is loaded from (e.g. when the checkpoint's
    tokenizer cache moved); it must still be the tokenizer the model was trained with.
    """
    path = Path(path)
    checkpoint = read_checkpoint(path)
    hyper_parameters = checkpoint["hyper_parameters"]
    config = model_config(checkpoint, path)
    model = Transformer(config)
    result = model.load_state_dict(model_state_dict(checkpoint), strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise CheckpointError(
            f"{path} does not fit its own model_config: missing weights "
            f"{result.missing_keys[:5]}, unexpected weights {result.unexpected_keys[:5]}"
        )
    if tokenizer_dir is None:
        tokenizer_dir = _tokenizer_location(checkpoint)
    tokenizer = _load_matching_tokenizer(path, tokenizer_dir, hyper_parameters, config)
    return LoadedCheckpoint(
        path=path,
        model=model.to(device).eval(),
        tokenizer=tokenizer,
        tokenizer_dir=tokenizer_dir,
        src_lang=str(hyper_parameters["src_lang"]),
        tgt_lang=str(hyper_parameters["tgt_lang"]),
        bos_id=int(hyper_parameters["bos_id"]),
        eos_id=int(hyper_parameters["eos_id"]),
        pad_id=int(hyper_parameters["pad_id"]),
        hyper_parameters=hyper_parameters,
    )


def _tokenizer_location(checkpoint: Mapping) -> str:
    """The tokenizer directory the checkpoint names or, where that does not exist (another
    machine, a cleared cache), a cache copy of the tokenizer files embedded in the checkpoint."""
    from transformer_nmt.data import restore_tokenizer

    named = str(checkpoint["hyper_parameters"]["tokenizer_dir"])
    embedded = checkpoint.get(TOKENIZER_FILES_KEY)
    if Path(named).exists() or not embedded:
        return named
    return str(restore_tokenizer(embedded, Path(os.path.expanduser(default_cache_dir()))))


def _load_matching_tokenizer(
    path: Path, tokenizer_dir: str, hyper_parameters: Mapping, config: TransformerConfig
):
    from transformer_nmt.data import DataError, load_tokenizer, special_ids

    try:
        tokenizer = load_tokenizer(tokenizer_dir)
    except DataError as error:
        raise CheckpointError(
            f"cannot load the tokenizer of checkpoint {path} from {tokenizer_dir!r}: {error}. "
            f"If it moved, pass tokenizer_dir=/path/to/that/tokenizer"
        ) from error
    fix = (
        f"use the tokenizer checkpoint {path} was trained with (its hyper_parameters name "
        f"{hyper_parameters['tokenizer_dir']!r}; override with tokenizer_dir=...)"
    )
    if len(tokenizer) != config.tgt_vocab_size:
        raise CheckpointError(
            f"tokenizer {tokenizer_dir!r} does not match checkpoint {path}: it has "
            f"{len(tokenizer)} tokens but the model's target vocabulary has "
            f"{config.tgt_vocab_size}; {fix}"
        )
    ids = special_ids(tokenizer)
    expected = (int(hyper_parameters["pad_id"]), int(hyper_parameters["bos_id"]))
    expected += (int(hyper_parameters["eos_id"]),)
    if (ids.pad, ids.bos, ids.eos) != expected or ids.pad != config.pad_id:
        raise CheckpointError(
            f"tokenizer {tokenizer_dir!r} does not match checkpoint {path}: its pad/bos/eos ids "
            f"are {(ids.pad, ids.bos, ids.eos)} but the checkpoint was trained with {expected} "
            f"(model pad_id {config.pad_id}); {fix}"
        )
    return tokenizer


# -- averaging ---------------------------------------------------------------------------------


def average_checkpoints(paths: Sequence[Path | str], out_path: Path | str) -> Path:
    """Average the Transformer weights of ``paths`` into one checkpoint at ``out_path``.

    All must share one ``model_config``. The result keeps the first checkpoint's
    hyper-parameters (and its non-model weights), drops optimizer, scheduler and loop states
    (it can be evaluated, translated with or fine-tuned from, not resumed), records the inputs
    under ``averaged_from``, and is written atomically. Weights are summed in float64, one
    checkpoint in memory at a time, and tied weights stay tied.
    """
    paths = [Path(p) for p in paths]
    if not paths:
        raise CheckpointError("no checkpoints to average; give inputs=[a.ckpt,b.ckpt,...]")
    first = read_checkpoint(paths[0])
    reference_config = first["hyper_parameters"]["model_config"]
    model_keys = [k for k in first["state_dict"] if k.startswith(MODEL_PREFIX)]
    sums = {k: first["state_dict"][k].double() for k in model_keys if _is_float(first, k)}
    for path in paths[1:]:
        checkpoint = read_checkpoint(path)
        config = checkpoint["hyper_parameters"]["model_config"]
        if config != reference_config:
            differing = sorted(k for k in {*config, *reference_config}
                               if config.get(k) != reference_config.get(k))  # fmt: skip
            raise CheckpointError(
                f"cannot average {path} with {paths[0]}: their model_config differ in "
                f"{differing}; average checkpoints of one training run only"
            )
        keys = [k for k in checkpoint["state_dict"] if k.startswith(MODEL_PREFIX)]
        if sorted(keys) != sorted(model_keys):
            raise CheckpointError(
                f"cannot average {path} with {paths[0]}: their model weights have different names"
            )
        for key in sums:
            sums[key] += checkpoint["state_dict"][key].double()
        del checkpoint
    state_dict = dict(first["state_dict"])
    averaged_by_storage: dict[tuple, torch.Tensor] = {}
    for key, total in sums.items():
        original = first["state_dict"][key]
        storage = _storage_key(original)  # tied weights share a storage: average them once
        if storage not in averaged_by_storage:
            averaged_by_storage[storage] = (total / len(paths)).to(original.dtype)
        state_dict[key] = averaged_by_storage[storage]
    averaged = {key: first[key] for key in _KEPT_ON_AVERAGING if key in first}
    averaged["state_dict"] = state_dict
    averaged["averaged_from"] = [str(p) for p in paths]
    out_path = save_checkpoint(averaged, out_path)
    log.info("averaged %d checkpoints into %s", len(paths), out_path)
    return out_path


def last_checkpoints(directory: Path | str, n: int) -> list[Path]:
    """The ``n`` newest ``*.ckpt`` files of ``directory``, oldest first, excluding ``last*.ckpt``
    (a copy of the newest). Newest = highest ``step=N`` (else ``epoch=N``) in the file name,
    else the latest modification time.
    """
    directory = Path(directory)
    if n < 1:
        raise CheckpointError(f"last_n must be a positive integer, got {n}")
    if not directory.is_dir():
        raise CheckpointError(f"checkpoint directory {directory} does not exist")
    candidates = [p for p in directory.glob("*.ckpt") if not p.name.startswith("last")]
    if len(candidates) < n:
        raise CheckpointError(
            f"asked for the last {n} checkpoints but {directory} holds {len(candidates)} "
            f"({sorted(p.name for p in candidates)}); keep more checkpoints while training "
            f"(ModelCheckpoint save_top_k=-1) or lower last_n"
        )
    return sorted(candidates, key=_checkpoint_age)[-n:]


def _checkpoint_age(path: Path) -> tuple:
    for field in ("step", "epoch"):
        match = re.search(rf"{field}=(\d+)", path.name)
        if match:
            return (0 if field == "epoch" else 1, int(match.group(1)), path.stat().st_mtime)
    return (-1, 0, path.stat().st_mtime)


def _is_float(checkpoint: Mapping, key: str) -> bool:
    value = checkpoint["state_dict"][key]
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def _storage_key(tensor: torch.Tensor) -> tuple:
    storage = tensor.untyped_storage().data_ptr()
    return (storage, tensor.storage_offset(), tuple(tensor.shape), tuple(tensor.stride()))


def _plain(value):
    """Hyper-parameters as plain dicts/lists (they may be OmegaConf or AttributeDict objects)."""
    if isinstance(value, DictConfig | ListConfig):
        return OmegaConf.to_container(value, resolve=True)
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value
