"""Fixtures shared across the test packages, and test-wide settings: no network, no W&B
account, deterministic seeds.

A package's own conftest.py holds only the fixtures of that package alone; what tests import
(corpora, the tiny model, the reverse task, checkpoints, commands) lives in ``tests.helpers``.
"""

import os
from pathlib import Path

import pytest
import torch

# Before `datasets` / `huggingface_hub` are imported: they read these at import.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")  # for the processes tests start

from tests.helpers.commands import run_train  # noqa: E402
from tests.helpers.corpus import make_pairs, write_corpus  # noqa: E402
from tests.helpers.marian_folder import build_marian_folder  # noqa: E402
from tests.helpers.reverse_task import half_trained_reverse_model  # noqa: E402
from tests.helpers.run_if import multi30k_location  # noqa: E402
from tests.helpers.slow import slow_fixture, unmarked_users_of_slow_fixtures  # noqa: E402
from tests.helpers.tiny_checkpoint import (  # noqa: E402
    Workspace,
    build_workspace,
    write_other_tokenizer,
)
from tests.helpers.tiny_runs import ablation_overrides, tiny_run_overrides, without  # noqa: E402
from transformer_nmt.data import load_tokenizer, tokenizer_identity  # noqa: E402

NORMS = ("post", "pre")


def pytest_collection_modifyitems(config, items) -> None:
    unmarked = unmarked_users_of_slow_fixtures(items)
    if unmarked:
        raise pytest.UsageError(
            "tests that use a fixture which trains or starts processes must be marked "
            "@pytest.mark.slow:\n" + "\n".join(unmarked)
        )


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """Tiny models run up to 20x slower with 2 OpenMP threads on a busy 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def multi30k_dir() -> Path:
    """The real Multi30k corpus, from MULTI30K_DIR; its tests carry ``@run_if(multi30k=True)``."""
    location = multi30k_location()
    if location is None:
        pytest.fail("a test that uses multi30k_dir must be marked @run_if(multi30k=True)")
    return location


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory) -> Path:
    """The training corpus: lowercase pairs of 2 to 9 words (easy to learn), train 400 / val 40
    / test 40, as {split}.{en,de} text files."""
    splits = {"train": (400, 1), "val": (40, 2), "test": (40, 3)}
    pairs = {
        split: make_pairs(n, seed, min_words=2, max_words=9, capitalised=False)
        for split, (n, seed) in splits.items()
    }
    return write_corpus(tmp_path_factory.mktemp("corpus"), pairs)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """Shared tokenizer/encoding cache: the tiny BPE is trained once per session."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="session")
def tiny_overrides(corpus_dir, cache_dir) -> list[str]:
    """``train.py`` overrides for a tiny model on the training corpus: seconds, CPU, no W&B."""
    return tiny_run_overrides(corpus_dir, cache_dir)


@pytest.fixture(scope="session")
def workspace(tmp_path_factory) -> Workspace:
    """A Multi30k-layout corpus, its BPE and an untrained tiny model's checkpoint."""
    return build_workspace(tmp_path_factory.mktemp("workspace"))


@pytest.fixture(scope="session")
def other_tokenizer_dir(tmp_path_factory, workspace) -> Path:
    """A BPE of the workspace tokenizer's size, trained on other text: other ids, same size."""
    directory = write_other_tokenizer(tmp_path_factory.mktemp("other") / "tokenizer")
    other = load_tokenizer(str(directory))
    assert len(other) == len(workspace.tokenizer)
    assert tokenizer_identity(other) != tokenizer_identity(workspace.tokenizer)
    return directory


@pytest.fixture(scope="session")
def reverse_model():
    """A tiny model trained for a second on the reverse task (shared: do not train it)."""
    return half_trained_reverse_model()


@slow_fixture(scope="session")
def toys(tmp_path_factory) -> dict:
    """A tiny model of each norm, trained 150 Adam steps on the toy corpus (seconds each):
    {norm: ToyCheckpoint}."""
    # Imported here, not at collection: it imports Lightning.
    from tests.helpers.toy_checkpoint import train_toy_checkpoint

    root = tmp_path_factory.mktemp("toys")
    return {norm: train_toy_checkpoint(root / norm, norm) for norm in NORMS}


@slow_fixture(scope="session")
def ct2_dirs(toys, tmp_path_factory) -> dict:
    """Each toy checkpoint exported to CTranslate2 in float32 and int8: {(norm, quantization)}."""
    from transformer_nmt.export import export_ctranslate2

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


@slow_fixture(scope="session")
def tiny_sweep(tiny_overrides, tmp_path_factory) -> Path:
    """``python train.py -m ablation=norm_warmup experiment=multi30k_base`` cut to post/pre x one
    warmup, 8 steps, logged to W&B offline; returns the sweep directory (jobs 0 = post-norm,
    1 = pre-norm).
    """
    root = tmp_path_factory.mktemp("sweep")
    args = without(ablation_overrides(tiny_overrides), "logger=") + ["logger=wandb"]
    sweep_dir = root / "multirun" / "norm_warmup"
    run_train(
        ["-m", "ablation=norm_warmup", "experiment=multi30k_base", *args]
        + [f"hydra.sweep.dir={sweep_dir}"],
        cwd=root,
        env={"WANDB_MODE": "offline"},
    )
    return sweep_dir
