"""A tiny Multi30k-layout corpus and the overrides that train a tiny model on it in seconds."""

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[2]

_EN_DE = {
    "a": "ein", "man": "Mann", "woman": "Frau", "dog": "Hund", "plays": "spielt",
    "with": "mit", "the": "dem", "ball": "Ball", "in": "im", "park": "Park",
    "red": "roten", "small": "kleinen", "child": "Kind", "runs": "rennt", "and": "und",
    "sits": "sitzt", "on": "auf", "bench": "Bank", "two": "zwei", "people": "Leute",
}  # fmt: skip


@pytest.fixture(autouse=True, scope="package")
def _one_torch_thread():
    """Tiny models run 20x slower with 2 OpenMP threads on a busy 2-core CI machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """Word-for-word English/German sentence pairs of 2 to 9 words (easy to learn)."""
    rng = random.Random(seed)
    words = list(_EN_DE)
    pairs = []
    for _ in range(n):
        en_words = [rng.choice(words) for _ in range(rng.randint(2, 9))]
        pairs.append((" ".join(en_words) + " .", " ".join(_EN_DE[w] for w in en_words) + " ."))
    return pairs


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory) -> Path:
    """train (400 pairs) / val (40) / test (40) as {split}.{en,de} text files."""
    directory = tmp_path_factory.mktemp("corpus")
    for split, (n, seed) in {"train": (400, 1), "val": (40, 2), "test": (40, 3)}.items():
        pairs = make_pairs(n, seed)
        (directory / f"{split}.en").write_text("".join(en + "\n" for en, _ in pairs))
        (directory / f"{split}.de").write_text("".join(de + "\n" for _, de in pairs))
    return directory


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """Shared tokenizer/encoding cache: the tiny BPE is trained once per session."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="session")
def tiny_overrides(corpus_dir, cache_dir) -> list[str]:
    """Overrides for a tiny model on the tiny corpus: ~35 batches per epoch, CPU, no W&B."""
    return [
        "data=multi30k",
        f"data.data_dir={corpus_dir}",
        "data.splits.test=test",
        "data.vocab_size=120",
        "data.max_len=32",
        "data.max_tokens=128",
        "data.num_workers=0",
        f"data.cache_dir={cache_dir}",
        "model=tiny",
        "model.d_model=32",
        "model.n_heads=2",
        "model.d_ff=64",
        "model.n_layers=1",
        "model.max_len=64",
        "scheduler.warmup=20",
        "trainer=cpu",
        "trainer.max_steps=12",
        "trainer.val_check_interval=6",
        "trainer.log_every_n_steps=1",
        "trainer.num_sanity_val_steps=0",
        "trainer.enable_progress_bar=false",
        "trainer.enable_model_summary=false",
        "logger=csv",
    ]


def run_train(args: list[str], cwd: Path, timeout: float = 240, env: dict | None = None):
    """Run ``python train.py args`` in ``cwd``; fail the test with its output if it fails."""
    environment = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1", **(env or {})}
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "train.py"), *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if result.returncode != 0:
        pytest.fail(
            f"train.py {' '.join(args)} failed:\n{result.stdout[-4000:]}\n{result.stderr[-6000:]}"
        )
    return result
