"""``python export.py``: a checkpoint as a Hugging Face folder or a CTranslate2 directory."""

from __future__ import annotations

import logging
from pathlib import Path

from hydra.utils import to_absolute_path
from omegaconf import DictConfig

from transformer_nmt.export import QUANTIZATIONS, export_ctranslate2, export_huggingface
from transformer_nmt.export.output import check_export_output

from .errors import UsageError
from .loading import load_from_config, log_to_stderr, search_options

log = logging.getLogger(__name__)

FORMATS = ("hf", "ct2")


def export_command(cfg: DictConfig) -> Path:
    """Export ``ckpt_path`` to ``output`` in ``format``; prints the directory written."""
    log_to_stderr()
    if cfg.format not in FORMATS:
        raise UsageError(
            f"format must be hf (a Marian / Pegasus folder for transformers and the Hub) or ct2 "
            f"(CTranslate2); got {cfg.format!r}"
        )
    if cfg.quantization not in QUANTIZATIONS:
        raise UsageError(f"quantization must be one of {', '.join(QUANTIZATIONS)}")
    if cfg.format == "hf" and cfg.quantization != "float32":
        raise UsageError("quantization is for format=ct2; a Hugging Face export keeps float32")
    output = Path(to_absolute_path(cfg.output))
    inputs = [to_absolute_path(path) for path in (cfg.ckpt_path, cfg.tokenizer_dir) if path]
    check_export_output(output, inputs, cfg.overwrite)  # before the checkpoint is read
    checkpoint = load_from_config(cfg, device="cpu")
    if cfg.format == "hf":
        export_huggingface(checkpoint, output, search_options(cfg), overwrite=cfg.overwrite)
    else:
        export_ctranslate2(checkpoint, output, cfg.quantization, overwrite=cfg.overwrite)
    log.info("exported %s to %s (format=%s)", checkpoint.path, output, cfg.format)
    print(output)
    return output
