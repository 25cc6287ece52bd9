"""Fixtures of the export tests: briefly trained tiny checkpoints of both norms, their exports,
and opus-mt-like Marian / Pegasus folders built offline."""

import pytest

from tests.helpers.marian_folder import build_marian_folder
from tests.helpers.slow import slow_fixture
from tests.helpers.toy_checkpoint import ToyCheckpoint, train_toy_checkpoint
from transformer_nmt.export import export_ctranslate2, export_huggingface

NORMS = ("post", "pre")


@slow_fixture(scope="session")
def toys(tmp_path_factory) -> dict[str, ToyCheckpoint]:
    """A tiny model of each norm, trained 150 Adam steps on the toy corpus (seconds each)."""
    root = tmp_path_factory.mktemp("toys")
    return {norm: train_toy_checkpoint(root / norm, norm) for norm in NORMS}


@slow_fixture(scope="session")
def hf_dirs(toys, tmp_path_factory) -> dict:
    """Each toy checkpoint exported to Hugging Face: post-norm → Marian, pre-norm → Pegasus."""
    root = tmp_path_factory.mktemp("hf")
    return {norm: export_huggingface(toy.checkpoint, root / norm) for norm, toy in toys.items()}


@slow_fixture(scope="session")
def ct2_dirs(toys, tmp_path_factory) -> dict:
    """Each toy checkpoint exported to CTranslate2 in float32 and int8: {(norm, quantization)}."""
    root = tmp_path_factory.mktemp("ct2")
    return {
        (norm, quantization): export_ctranslate2(
            toy.checkpoint, root / f"{norm}-{quantization}", quantization
        )
        for norm, toy in toys.items()
        for quantization in ("float32", "int8")
    }


@pytest.fixture(scope="session", params=["marian", "pegasus"])
def marian_dir(request, tmp_path_factory):
    """An opus-mt-like folder (SentencePiece tokenizer, pad = decoder start, swish, a logits
    bias) of each HF model type, built offline in a second."""
    return build_marian_folder(tmp_path_factory.mktemp(request.param) / "hf", request.param)
