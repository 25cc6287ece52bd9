"""Fixtures for the data pipeline tests: offline Hub, tiny corpora written into tmp_path."""

import gzip
import json
import os
import random
from pathlib import Path

import pytest

# Must happen before `datasets` / `huggingface_hub` are imported: they read these at import.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

from transformer_nmt.data import TranslationDataModule  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
MULTI30K_DIR = Path(os.environ.get("MULTI30K_DIR", REPO_ROOT.parent / "shared/data/multi30k"))

_EN_DE = {
    "a": "ein", "man": "Mann", "woman": "Frau", "dog": "Hund", "plays": "spielt",
    "with": "mit", "the": "dem", "ball": "Ball", "in": "im", "park": "Park",
    "red": "roten", "small": "kleinen", "child": "Kind", "runs": "rennt", "and": "und",
    "sits": "sitzt", "on": "auf", "bench": "Bank", "two": "zwei", "people": "Leute",
}  # fmt: skip
LONG_PAIR_INDEX = 7  # a training pair far longer than the tests' max_len
EMPTY_PAIR_INDEX = 11  # a training pair whose German side is empty


@pytest.fixture(autouse=True)
def _offline_hub(monkeypatch, tmp_path_factory):
    """No network, and a private datasets cache so tests never touch ~/.cache."""
    import datasets
    import huggingface_hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    cache = tmp_path_factory.getbasetemp() / "hf_datasets_cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)


def make_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """Deterministic word-for-word English/German pairs of 1 to 14 words, capitalised."""
    rng = random.Random(seed)
    words = list(_EN_DE)
    pairs = []
    for _ in range(n):
        en_words = [rng.choice(words) for _ in range(rng.randint(1, 14))]
        en = " ".join(en_words).capitalize() + "."
        de = " ".join(_EN_DE[w] for w in en_words).capitalize() + "."
        pairs.append((en, de))
    return pairs


def tiny_splits() -> dict[str, list[tuple[str, str]]]:
    """train (with one overlong and one half-empty pair), val and test pairs."""
    train = make_pairs(240, seed=1)
    long_en = " ".join(["the small red dog runs in the park"] * 12)
    train[LONG_PAIR_INDEX] = (long_en + ".", " ".join(["der kleine rote Hund"] * 20) + ".")
    train[EMPTY_PAIR_INDEX] = ("A dog.", "")
    return {"train": train, "val": make_pairs(30, seed=2), "test": make_pairs(25, seed=3)}


def write_text(path: Path, lines: list[str]) -> None:
    data = "".join(line + "\n" for line in lines).encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)


@pytest.fixture
def tiny_pairs() -> dict[str, list[tuple[str, str]]]:
    return tiny_splits()


@pytest.fixture
def tiny_dir(tmp_path, tiny_pairs) -> Path:
    """A Multi30k-layout directory: train gzip-compressed, val/test plain text."""
    directory = tmp_path / "corpus"
    directory.mkdir()
    for split, pairs in tiny_pairs.items():
        suffix = ".gz" if split == "train" else ""
        write_text(directory / f"{split}.en{suffix}", [en for en, _ in pairs])
        write_text(directory / f"{split}.de{suffix}", [de for _, de in pairs])
    return directory


@pytest.fixture
def wmt16_jsonl(tmp_path, tiny_pairs) -> dict[str, str]:
    """WMT16-schema jsonl files ({"translation": {"de": ..., "en": ...}}) for all three splits."""
    files = {}
    for split, name in (("train", "train"), ("val", "validation"), ("test", "test")):
        path = tmp_path / f"{name}.jsonl"
        with open(path, "w", encoding="utf-8") as handle:
            for en, de in tiny_pairs[split]:
                handle.write(json.dumps({"translation": {"de": de, "en": en}}) + "\n")
        files[name] = str(path)
    return files


@pytest.fixture
def cache_dir(tmp_path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def make_dm(tiny_dir, cache_dir):
    """Build a local-source datamodule over the tiny corpus; keyword arguments override."""

    def make(**overrides) -> TranslationDataModule:
        options = {
            "source": "text_files",
            "data_dir": str(tiny_dir),
            "vocab_size": 200,
            "max_len": 32,
            "max_tokens": 256,
            "cache_dir": str(cache_dir),
            **overrides,
        }
        return TranslationDataModule(**options)

    return make


@pytest.fixture(scope="session")
def multi30k_dm(tmp_path_factory) -> TranslationDataModule:
    """Multi30k with an 8000-type BPE, trained once per test session."""
    if not MULTI30K_DIR.is_dir():
        pytest.skip(f"Multi30k not found at {MULTI30K_DIR} (set MULTI30K_DIR)")
    dm = TranslationDataModule(
        source="text_files",
        data_dir=str(MULTI30K_DIR),
        splits={"test": "test_2016_flickr"},
        vocab_size=8000,
        max_tokens=4096,
        cache_dir=str(tmp_path_factory.mktemp("multi30k_cache")),
    )
    dm.prepare_data()
    dm.setup(None)
    return dm
