"""The checkpoint format: what a checkpoint holds, how it is written, read, loaded and averaged.

A checkpoint of this project is a Lightning ``.ckpt`` whose ``hyper_parameters`` hold
``model_config`` (every :class:`~transformer_nmt.model.TransformerConfig` field),
``tokenizer_dir`` (for :func:`~transformer_nmt.data.load_tokenizer`), ``src_lang``,
``tgt_lang``, ``bos_id``, ``eos_id``, ``pad_id`` and, since it was added, ``tokenizer_identity``
(:func:`~transformer_nmt.data.tokenizer_identity`); whose ``state_dict`` holds the Transformer's
parameters under the prefix ``model.``; and whose ``tokenizer_files`` entry holds the tokenizer's
files, so that it works where the tokenizer cache does not exist. It is read with plain
``torch.load`` (pickle: load only checkpoints you trust), without the LightningModule.

Whoever uses a checkpoint's model with a tokenizer checks that it is the one the model was trained
with (:func:`tokenizer_mismatch`): same size and special ids are not enough, since two BPEs of one
size give unrelated ids.

Every checkpoint file is written atomically (:class:`AtomicCheckpointIO`, :func:`save_checkpoint`):
a crash leaves the old file or the new one, never half of one.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO
from omegaconf import DictConfig, ListConfig, OmegaConf

from transformer_nmt.atomic import (
    check_writable_directory,
    remove_stale_temporaries,
    write_file_atomically,
)
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
TOKENIZER_IDENTITY_KEY = "tokenizer_identity"  # a hyper-parameter; older checkpoints lack it
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
    """``torch.save`` a checkpoint dict to ``path`` atomically; returns the path."""
    path = write_file_atomically(path, lambda handle: torch.save(checkpoint, handle), binary=True)
    remove_stale_temporaries(path)
    return path


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's ``TorchCheckpointIO`` with local saves through :func:`save_checkpoint`.

    Lightning 2.6 saves through an fsspec transaction that writes into the *system* temp
    directory and commits with ``shutil.move``: an atomic rename only when that directory shares
    the checkpoint's filesystem, a copy (and a truncated ``last.ckpt`` if killed) otherwise, and
    nothing is fsynced. Remote URLs keep Lightning's own path.
    """

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | os.PathLike, storage_options: Any = None
    ) -> None:
        if "://" in str(path):
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
        raise CheckpointError(f"checkpoint {path} does not exist; {_TRAIN_HINT}")
    if path.is_dir():
        raise CheckpointError(f"checkpoint {path} is a directory; {_TRAIN_HINT}")
    try:
        checkpoint = _torch_load(path, mmap)
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


def _torch_load(path: Path, mmap: bool):
    if mmap:
        try:
            return torch.load(path, map_location="cpu", weights_only=False, mmap=True)
        except RuntimeError:  # a legacy (non-zip) file cannot be mapped
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
    tokenizer, tokenizer_dir = _checkpoint_tokenizer(path, checkpoint, tokenizer_dir)
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


def checkpoint_tokenizer_dir(checkpoint: Mapping) -> str:
    """The tokenizer directory the checkpoint names or, where that does not exist (another
    machine, a cleared cache), a cache copy of the tokenizer files embedded in the checkpoint."""
    named = str(checkpoint["hyper_parameters"]["tokenizer_dir"])
    if Path(named).exists() or not checkpoint.get(TOKENIZER_FILES_KEY):
        return named
    return _embedded_tokenizer_dir(checkpoint)


def tokenizer_mismatch(checkpoint: Mapping, tokenizer) -> str | None:
    """Why ``tokenizer`` is not the one the checkpoint's model was trained with, or None.

    Compared: the vocabulary size, the special ids and the tokenizer's identity (the stored
    ``tokenizer_identity``, else that of the embedded tokenizer files; a checkpoint with
    neither is checked on size and special ids alone).
    """
    from transformer_nmt.data import special_ids, tokenizer_identity

    hyper_parameters = checkpoint["hyper_parameters"]
    vocab_size = int(hyper_parameters["model_config"]["tgt_vocab_size"])
    if len(tokenizer) != vocab_size:
        return f"it has {len(tokenizer)} tokens but the model's target vocabulary has {vocab_size}"
    ids = tuple(special_ids(tokenizer))
    expected = tuple(int(hyper_parameters[key]) for key in ("pad_id", "bos_id", "eos_id"))
    model_pad_id = int(hyper_parameters["model_config"]["pad_id"])
    if ids != expected or ids[0] != model_pad_id:
        return (
            f"its pad/bos/eos ids are {ids} but the checkpoint was trained with {expected} "
            f"(model pad_id {model_pad_id})"
        )
    identity = expected_tokenizer_identity(checkpoint)
    if identity is not None and tokenizer_identity(tokenizer) != identity:
        return (
            f"it has the same size ({vocab_size} tokens) but another vocabulary or "
            f"segmentation: tokenizer identity {tokenizer_identity(tokenizer)}, the "
            f"checkpoint's {identity}"
        )
    return None


def expected_tokenizer_identity(checkpoint: Mapping) -> str | None:
    """The identity of the checkpoint's tokenizer: stored at save time, else computed from the
    embedded tokenizer files; None if the checkpoint has neither."""
    stored = checkpoint["hyper_parameters"].get(TOKENIZER_IDENTITY_KEY)
    if stored:
        return str(stored)
    if not checkpoint.get(TOKENIZER_FILES_KEY):
        return None
    from transformer_nmt.data import load_tokenizer, tokenizer_identity

    return tokenizer_identity(load_tokenizer(_embedded_tokenizer_dir(checkpoint)))


def _embedded_tokenizer_dir(checkpoint: Mapping) -> str:
    from transformer_nmt.data import restore_tokenizer

    cache_dir = Path(os.path.expanduser(default_cache_dir()))
    return str(restore_tokenizer(checkpoint[TOKENIZER_FILES_KEY], cache_dir))


def _checkpoint_tokenizer(
    path: Path, checkpoint: Mapping, override: str | None
) -> tuple[object, str]:
    """The checkpoint's tokenizer and where it was loaded from: ``override`` if given, else the
    directory the checkpoint names or, if that no longer holds the same tokenizer, the copy
    embedded in the checkpoint. Anything else is refused, naming both tokenizers."""
    named = str(checkpoint["hyper_parameters"]["tokenizer_dir"])
    embedded = bool(checkpoint.get(TOKENIZER_FILES_KEY))
    location = override or checkpoint_tokenizer_dir(checkpoint)
    fallback = override is None and location == named and embedded
    try:
        tokenizer = _load_tokenizer(path, location)
        problem = tokenizer_mismatch(checkpoint, tokenizer)
    except CheckpointError:
        if not fallback:
            raise
        problem = "it cannot be loaded"
    if problem is None:
        return tokenizer, location
    if fallback:
        location = _embedded_tokenizer_dir(checkpoint)
        tokenizer = _load_tokenizer(path, location)
        if tokenizer_mismatch(checkpoint, tokenizer) is None:
            log.warning(
                "tokenizer %s is no longer the one checkpoint %s was trained with (%s); using "
                "the copy embedded in the checkpoint, %s",
                named,
                path,
                problem,
                location,
            )
            return tokenizer, location
    if override is None and location == named:
        fix = "its files changed since training: point tokenizer_dir= at the original tokenizer"
    elif override is None:
        fix = f"the tokenizer files embedded in the checkpoint do not fit it; {_TRAIN_HINT}"
    elif embedded:
        fix = f"the checkpoint's own is {named!r}, also embedded in it: leave tokenizer_dir unset"
    else:
        fix = f"the checkpoint's own is {named!r}: point tokenizer_dir= at it or a copy of it"
    raise CheckpointError(
        f"tokenizer {location!r} is not the one checkpoint {path} was trained with: {problem}; "
        f"{fix}"
    )


def _load_tokenizer(path: Path, location: str):
    from transformer_nmt.data import DataError, load_tokenizer

    try:
        return load_tokenizer(location)
    except DataError as error:
        raise CheckpointError(
            f"cannot load the tokenizer of checkpoint {path} from {location!r}: {error}. "
            f"If it moved, pass tokenizer_dir=/path/to/that/tokenizer"
        ) from error


# -- averaging ---------------------------------------------------------------------------------


def average_checkpoints(paths: Sequence[Path | str], out_path: Path | str) -> Path:
    """Average the Transformer weights of ``paths`` into one checkpoint at ``out_path``.

    All must share one ``model_config``, one tokenizer and one translation direction. The result
    keeps the first checkpoint's hyper-parameters (and its non-model weights), drops optimizer,
    scheduler and loop states (it can be evaluated, translated with or fine-tuned from, not
    resumed), records the inputs under ``averaged_from``, and is written atomically. Weights are
    summed in float64, one checkpoint in memory at a time, and tied weights stay tied.
    """
    paths, out_path = [Path(p) for p in paths], Path(out_path)
    if not paths:
        raise CheckpointError("no checkpoints to average; give inputs=[a.ckpt,b.ckpt,...]")
    _require_writable_output(out_path)
    first = read_checkpoint(paths[0])
    sums = {k: first["state_dict"][k].double() for k in _model_keys(first) if _is_float(first, k)}
    for path in paths[1:]:
        checkpoint = read_checkpoint(path)
        _require_same_model(checkpoint, path, first, paths[0])
        for key, total in sums.items():
            weight = checkpoint["state_dict"][key]
            if not isinstance(weight, torch.Tensor) or weight.shape != total.shape:
                shape = tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight)
                raise CheckpointError(
                    f"cannot average {path} with {paths[0]}: weight {key!r} has shape {shape} "
                    f"in one and {tuple(total.shape)} in the other; average checkpoints of one "
                    f"training run only"
                )
            total += weight.double()
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
    try:
        out_path = save_checkpoint(averaged, out_path)
    except OSError as error:
        raise CheckpointError(_unwritable(out_path, error)) from error
    log.info("averaged %d checkpoints into %s", len(paths), out_path)
    return out_path


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
    elif not _same_tokenizer(checkpoint, reference):
        why = (
            f"they were trained with different tokenizers "
            f"({checkpoint['hyper_parameters']['tokenizer_dir']!r} and "
            f"{reference['hyper_parameters']['tokenizer_dir']!r}), so their weights belong to "
            f"different token ids"
        )
    if why:
        raise CheckpointError(
            f"cannot average {path} with {reference_path}: {why}; average checkpoints of one "
            f"training run only"
        )


def _model_keys(checkpoint: Mapping) -> list[str]:
    return sorted(key for key in checkpoint["state_dict"] if key.startswith(MODEL_PREFIX))


def _direction(checkpoint: Mapping) -> tuple[str, str]:
    hyper_parameters = checkpoint["hyper_parameters"]
    return str(hyper_parameters["src_lang"]), str(hyper_parameters["tgt_lang"])


def _same_tokenizer(checkpoint: Mapping, other: Mapping) -> bool:
    """Whether two checkpoints were trained with one tokenizer: same identity, else same
    embedded files, else (checkpoints with neither) same special ids and tokenizer_dir."""
    files = checkpoint.get(TOKENIZER_FILES_KEY)
    if files and files == other.get(TOKENIZER_FILES_KEY):
        return True
    identities = expected_tokenizer_identity(checkpoint), expected_tokenizer_identity(other)
    if None not in identities:
        return identities[0] == identities[1]
    keys = ("tokenizer_dir", "pad_id", "bos_id", "eos_id")
    return all(
        checkpoint["hyper_parameters"][key] == other["hyper_parameters"][key] for key in keys
    )


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
