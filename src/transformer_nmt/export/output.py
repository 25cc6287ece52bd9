"""Where an export may write: never over its own input, and over an earlier export only."""

from __future__ import annotations

from pathlib import Path

import torch

from .errors import ExportOutputError
from .metadata import METADATA_FILE


def check_export_output(output: Path | str, inputs: list[Path | str], overwrite: bool) -> None:
    """Refuse an ``output`` that contains (or is) one of ``inputs`` (the checkpoint, its
    tokenizer), whatever ``overwrite`` says; an existing ``output`` unless ``overwrite``; and,
    with ``overwrite``, anything but an earlier export (a directory holding
    ``transformer_nmt.json``) or an empty directory: replacing it deletes nothing an export did
    not write."""
    output = Path(output).absolute()
    resolved = output.resolve()
    for source in inputs:
        if Path(source).absolute().resolve().is_relative_to(resolved):
            raise ExportOutputError(
                f"output {output} contains the export's input {source}; replacing it would "
                f"delete that input: choose another output"
            )
    if not output.exists():
        return
    if not overwrite:
        raise FileExistsError(f"output {output} already exists; add overwrite=true to replace it")
    if not output.is_dir():
        raise ExportOutputError(
            f"output {output} is a file, not an earlier export; overwrite=true replaces only an "
            f"earlier export: choose another output"
        )
    if any(output.iterdir()) and not (output / METADATA_FILE).is_file():
        raise ExportOutputError(
            f"output {output} is not an earlier export (it has no {METADATA_FILE}); "
            f"overwrite=true replaces only an earlier export: choose another output or empty it"
        )


def weight_bytes(model: torch.nn.Module) -> int:
    """The bytes the model's parameters take as stored: about what an export needs on disk."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def export_inputs(checkpoint) -> list[Path]:
    """What an export of ``checkpoint`` reads: the checkpoint file and its tokenizer's folder
    (unless that is a Hub name)."""
    tokenizer_dir = Path(checkpoint.tokenizer_dir or "")
    return [Path(checkpoint.path), *([tokenizer_dir] if checkpoint.tokenizer_dir and
                                     tokenizer_dir.is_dir() else [])]  # fmt: skip
