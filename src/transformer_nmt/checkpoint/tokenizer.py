"""A checkpoint's tokenizer: which one the model was trained with, and where to load it from.

Same size and special ids are not enough to call two tokenizers the same, since two BPEs of one
size give unrelated ids: :func:`tokenizer_mismatch` also compares their identity
(:func:`~transformer_nmt.data.tokenizer_identity`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from transformer_nmt.data.config import default_cache_dir

from .format import TOKENIZER_FILES_KEY, TOKENIZER_IDENTITY_KEY, TRAIN_HINT, CheckpointError

log = logging.getLogger(__name__)


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


def same_tokenizer(checkpoint: Mapping, other: Mapping) -> bool:
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


def checkpoint_tokenizer(
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
        fix = f"the tokenizer files embedded in the checkpoint do not fit it; {TRAIN_HINT}"
    elif embedded:
        fix = f"the checkpoint's own is {named!r}, also embedded in it: leave tokenizer_dir unset"
    else:
        fix = f"the checkpoint's own is {named!r}: point tokenizer_dir= at it or a copy of it"
    raise CheckpointError(
        f"tokenizer {location!r} is not the one checkpoint {path} was trained with: {problem}; "
        f"{fix}"
    )


def _embedded_tokenizer_dir(checkpoint: Mapping) -> str:
    from transformer_nmt.data import restore_tokenizer

    cache_dir = Path(os.path.expanduser(default_cache_dir()))
    return str(restore_tokenizer(checkpoint[TOKENIZER_FILES_KEY], cache_dir))


def _load_tokenizer(path: Path, location: str):
    from transformer_nmt.data import DataError, load_tokenizer

    try:
        return load_tokenizer(location)
    except DataError as error:
        raise CheckpointError(
            f"cannot load the tokenizer of checkpoint {path} from {location!r}: {error}. "
            f"If it moved, pass tokenizer_dir=/path/to/that/tokenizer"
        ) from error
