"""export.py refuses outputs that would delete its input before reading anything, and a CUDA
device where there is none is one usage error; in-process (no model is loaded)."""

import pytest
import torch
from omegaconf import OmegaConf

from transformer_nmt.cli.errors import UsageError
from transformer_nmt.cli.export import export_command
from transformer_nmt.cli.loading import resolve_device
from transformer_nmt.export.errors import ExportOutputError


def export_config(**options):
    defaults = {"format": "hf", "quantization": "float32", "overwrite": False}
    return OmegaConf.create({**defaults, "tokenizer_dir": None, **options})


def test_export_never_replaces_a_directory_holding_its_checkpoint(tmp_path):
    run = tmp_path / "run"
    ckpt = run / "checkpoints" / "best.ckpt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"weights")
    (run / "train.log").write_text("the run")
    cfg = export_config(ckpt_path=str(ckpt), output=str(run), overwrite=True)
    with pytest.raises(ExportOutputError, match=f"output {run} contains the export's input"):
        export_command(cfg)
    assert ckpt.read_bytes() == b"weights" and (run / "train.log").exists()


def test_export_with_overwrite_leaves_a_directory_that_is_no_export(tmp_path):
    ckpt, notes = tmp_path / "best.ckpt", tmp_path / "notes"
    notes.mkdir()
    (notes / "draft.md").write_text("mine")
    cfg = export_config(ckpt_path=str(ckpt), output=str(notes), overwrite=True)
    with pytest.raises(ExportOutputError, match="overwrite=true replaces only an earlier export"):
        export_command(cfg)
    assert (notes / "draft.md").read_text() == "mine"


def test_a_cuda_device_without_cuda_is_one_usage_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UsageError, match=r"device=cuda:1, but this PyTorch .* sees no CUDA GPU"):
        resolve_device("cuda:1")
    assert resolve_device("auto") == "cpu" and resolve_device("cpu") == "cpu"
