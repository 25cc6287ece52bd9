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

from tests.helpers.corpus import make_pairs, write_corpus  # noqa: E402
from tests.helpers.reverse_task import half_trained_reverse_model  # noqa: E402
from tests.helpers.run_if import multi30k_location  # noqa: E402
from tests.helpers.slow import unmarked_users_of_slow_fixtures  # noqa: E402
from tests.helpers.tiny_checkpoint import Workspace, build_workspace  # noqa: E402
from tests.helpers.tiny_runs import tiny_run_overrides  # noqa: E402


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
def reverse_model():
    """A tiny model trained for a second on the reverse task (shared: do not train it)."""
    return half_trained_reverse_model()
