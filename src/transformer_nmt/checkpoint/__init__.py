"""The checkpoint format: what a checkpoint holds, how it is written, read, loaded and averaged.

A checkpoint of this project is a Lightning ``.ckpt`` whose ``hyper_parameters`` hold
``model_config`` (every :class:`~transformer_nmt.model.TransformerConfig` field),
``tokenizer_dir`` (for :func:`~transformer_nmt.data.load_tokenizer`), ``src_lang``,
``tgt_lang``, ``bos_id``, ``eos_id``, ``pad_id`` and ``tokenizer_identity``
(:func:`~transformer_nmt.data.tokenizer_identity`); whose ``state_dict`` holds the Transformer's
parameters under the prefix ``model.``; and whose ``tokenizer_files`` entry holds the tokenizer's
files, so that it works where the tokenizer cache does not exist. It is read with plain
``torch.load`` (pickle: load only checkpoints you trust), without the LightningModule.

- ``format``: writing (atomically, and never with a NaN or infinite weight, so the file at a
  path stays the last good one), Lightning's :class:`AtomicCheckpointIO`, and reading;
- ``tokenizer``: whether a tokenizer is the one the model was trained with, and where to find it;
- ``loading``: :func:`load_checkpoint`, the model and its tokenizer, ready to translate with;
- ``averaging``: :func:`average_checkpoints` and :func:`last_checkpoints`.
"""

from .averaging import average_checkpoints, average_weights, last_checkpoints
from .format import (
    MODEL_PREFIX,
    REQUIRED_HYPER_PARAMETERS,
    TOKENIZER_FILES_KEY,
    TOKENIZER_IDENTITY_KEY,
    AtomicCheckpointIO,
    CheckpointError,
    check_finite_weights,
    embed_tokenizer_files,
    model_config,
    model_state_dict,
    read_checkpoint,
    save_checkpoint,
)
from .loading import LoadedCheckpoint, load_checkpoint
from .tokenizer import (
    checkpoint_tokenizer,
    checkpoint_tokenizer_dir,
    expected_tokenizer_identity,
    same_tokenizer,
    tokenizer_mismatch,
)

__all__ = [
    "MODEL_PREFIX",
    "REQUIRED_HYPER_PARAMETERS",
    "TOKENIZER_FILES_KEY",
    "TOKENIZER_IDENTITY_KEY",
    "AtomicCheckpointIO",
    "CheckpointError",
    "LoadedCheckpoint",
    "average_checkpoints",
    "average_weights",
    "check_finite_weights",
    "checkpoint_tokenizer",
    "checkpoint_tokenizer_dir",
    "embed_tokenizer_files",
    "expected_tokenizer_identity",
    "last_checkpoints",
    "load_checkpoint",
    "model_config",
    "model_state_dict",
    "read_checkpoint",
    "same_tokenizer",
    "save_checkpoint",
    "tokenizer_mismatch",
]
