"""Checkpoint averaging: the mean of the weights of several checkpoints of one training run.

:func:`average_weights` is the arithmetic, on plain state dicts; :func:`average_checkpoints`
reads the checkpoints, checks that they belong together and writes the result;
:func:`last_checkpoints` picks the newest ones of a directory.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from transformer_nmt.atomic import check_writable_directory

from .format import (
    MODEL_PREFIX,
    TOKENIZER_FILES_KEY,
    CheckpointError,
    model_config,
    read_checkpoint,
    save_checkpoint,
)
from .tokenizer import same_tokenizer

log = logging.getLogger(__name__)

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
_ONE_RUN = "average checkpoints of one training run only"


def average_weights(
    state_dicts: Iterable[tuple[str, Mapping[str, Any]]], keys: Sequence[str]
) -> dict[str, Any]:
    """The mean of the floating-point tensors under ``keys`` over the ``(name, state_dict)``
    pairs, taken one at a time (one state dict in memory besides the sums); every other entry
    comes from the first. Sums are float64; tensors that share storage in the first state dict
    (tied weights) share their mean too."""
    pairs = iter(state_dicts)
    first_name, first = next(pairs)
    sums = {
        key: first[key].double()
        for key in keys
        if isinstance(first[key], torch.Tensor) and first[key].is_floating_point()
    }
    count = 1
    for name, state_dict in pairs:
        _add_weights(sums, state_dict, f"cannot average {name} with {first_name}")
        count += 1
        del state_dict  # freed before the next one is read
    averaged = dict(first)
    mean_by_storage: dict[tuple, torch.Tensor] = {}
    for key, total in sums.items():
        original = first[key]
        storage = _storage_key(original)
        if storage not in mean_by_storage:
            mean_by_storage[storage] = (total / count).to(original.dtype)
        averaged[key] = mean_by_storage[storage]
    return averaged


def _add_weights(sums: dict[str, torch.Tensor], state_dict: Mapping[str, Any], what: str) -> None:
    for key, total in sums.items():
        weight = state_dict[key]
        if not isinstance(weight, torch.Tensor) or weight.shape != total.shape:
            shape = tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight)
            raise CheckpointError(
                f"{what}: weight {key!r} has shape {shape} in one and {tuple(total.shape)} in "
                f"the other; {_ONE_RUN}"
            )
        total += weight.double()


def average_checkpoints(paths: Sequence[Path | str], out_path: Path | str) -> Path:
    """Average the Transformer weights of ``paths`` into one checkpoint at ``out_path``.

    All must share one ``model_config``, one tokenizer and one translation direction. The result
    keeps the first checkpoint's hyper-parameters (and its non-model weights), drops optimizer,
    scheduler and loop states (it can be evaluated, translated with or fine-tuned from, not
    resumed), records the inputs under ``averaged_from``, and is written atomically.
    """
    paths, out_path = [Path(p) for p in paths], Path(out_path)
    if not paths:
        raise CheckpointError("no checkpoints to average; give inputs=[a.ckpt,b.ckpt,...]")
    _require_writable_output(out_path)
    _require_distinct(paths)
    first = read_checkpoint(paths[0])

    def state_dicts():
        yield str(paths[0]), first["state_dict"]
        for path in paths[1:]:
            checkpoint = read_checkpoint(path)
            _require_same_model(checkpoint, path, first, paths[0])
            yield str(path), checkpoint.pop("state_dict")

    averaged = {key: first[key] for key in _KEPT_ON_AVERAGING if key in first}
    averaged["state_dict"] = average_weights(state_dicts(), _model_keys(first))
    averaged["averaged_from"] = [str(p) for p in paths]
    try:
        out_path = save_checkpoint(averaged, out_path)
    except OSError as error:
        raise CheckpointError(_unwritable(out_path, error)) from error
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


def _require_same_model(checkpoint: Mapping, path: Path, reference: Mapping, reference_path: Path):
    """Refuse to average checkpoints of different models, tokenizers or directions."""
    config = asdict(model_config(checkpoint, path))
    reference_config = asdict(model_config(reference, reference_path))
    why = None
    if config != reference_config:
        differing = sorted(k for k in config if config[k] != reference_config[k])
        why = f"their model_config differ in {differing}"
    elif _model_keys(checkpoint) != _model_keys(reference):
        why = "their model weights have different names"
    elif _direction(checkpoint) != _direction(reference):
        why = (
            f"they translate different directions ({'→'.join(_direction(checkpoint))} and "
            f"{'→'.join(_direction(reference))})"
        )
    elif not same_tokenizer(checkpoint, reference):
        why = (
            f"they were trained with different tokenizers "
            f"({checkpoint['hyper_parameters']['tokenizer_dir']!r} and "
            f"{reference['hyper_parameters']['tokenizer_dir']!r}), so their weights belong to "
            f"different token ids"
        )
    if why:
        raise CheckpointError(f"cannot average {path} with {reference_path}: {why}; {_ONE_RUN}")


def _model_keys(checkpoint: Mapping) -> list[str]:
    return sorted(key for key in checkpoint["state_dict"] if key.startswith(MODEL_PREFIX))


def _direction(checkpoint: Mapping) -> tuple[str, str]:
    hyper_parameters = checkpoint["hyper_parameters"]
    return str(hyper_parameters["src_lang"]), str(hyper_parameters["tgt_lang"])


def _require_distinct(paths: Sequence[Path]) -> None:
    """Refuse a checkpoint given twice (by one name or two): it would count double."""
    seen: dict[Path, Path] = {}
    for path in paths:
        key = path.resolve()
        if key in seen:
            names = str(path) if seen[key] == path else f"{seen[key]} and {path}"
            raise CheckpointError(
                f"{names}: the same checkpoint is given twice, so its weights would count "
                f"double in the average; give each checkpoint once"
            )
        seen[key] = path


def _require_writable_output(out_path: Path) -> None:
    if out_path.is_dir():
        raise CheckpointError(
            f"output {out_path} is a directory; give a file name, e.g. "
            f"output={out_path / 'averaged.ckpt'}"
        )
    try:
        check_writable_directory(out_path.parent)
    except OSError as error:
        raise CheckpointError(_unwritable(out_path, error)) from error


def _unwritable(out_path: Path, error: OSError) -> str:
    return f"cannot write {out_path}: {error.strerror or error}; choose another output="


def _checkpoint_age(path: Path) -> tuple:
    for field in ("step", "epoch"):
        match = re.search(rf"{field}=(\d+)", path.name)
        if match:
            return (0 if field == "epoch" else 1, int(match.group(1)), path.stat().st_mtime)
    return (-1, 0, path.stat().st_mtime)


def _storage_key(tensor: torch.Tensor) -> tuple:
    storage = tensor.untyped_storage().data_ptr()
    return (storage, tensor.storage_offset(), tuple(tensor.shape), tuple(tensor.stride()))
