"""A checkpoint ready to translate with: its model and the tokenizer it was trained with."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from transformer_nmt.model import Transformer

from .format import CheckpointError, model_config, model_state_dict, read_checkpoint
from .tokenizer import checkpoint_tokenizer


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
    model = Transformer(model_config(checkpoint, path))
    result = model.load_state_dict(model_state_dict(checkpoint), strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise CheckpointError(
            f"{path} does not fit its own model_config: missing weights "
            f"{result.missing_keys[:5]}, unexpected weights {result.unexpected_keys[:5]}"
        )
    tokenizer, tokenizer_dir = checkpoint_tokenizer(path, checkpoint, tokenizer_dir)
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
