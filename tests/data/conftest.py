"""Fixtures of the data pipeline tests: a flawed tiny corpus written per test, an offline Hub,
and Multi30k with its real BPE."""

import json
from pathlib import Path

import pytest

from tests.helpers.corpus import flawed_splits, write_corpus
from tests.helpers.slow import slow_fixture
from transformer_nmt.data import TranslationDataModule


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


@pytest.fixture
def tiny_pairs() -> dict[str, list[tuple[str, str]]]:
    """train (with one over-long and one half-empty pair), val and test pairs."""
    return flawed_splits()


@pytest.fixture
def tiny_dir(tmp_path, tiny_pairs) -> Path:
    """A Multi30k-layout directory: train gzip-compressed, val/test plain text."""
    return write_corpus(tmp_path / "corpus", tiny_pairs, gzip_train=True)


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
def fresh_cache_dir(tmp_path) -> Path:
    """A tokenizer/encoding cache of this test alone, empty at the start."""
    return tmp_path / "cache"


@pytest.fixture
def make_dm(tiny_dir, fresh_cache_dir):
    """Build a local-source datamodule over the tiny corpus; keyword arguments override."""

    def make(**overrides) -> TranslationDataModule:
        options = {
            "source": "text_files",
            "data_dir": str(tiny_dir),
            "vocab_size": 200,
            "max_len": 32,
            "max_tokens": 256,
            "cache_dir": str(fresh_cache_dir),
            **overrides,
        }
        return TranslationDataModule(**options)

    return make


@slow_fixture(scope="session")
def multi30k_dm(multi30k_dir, tmp_path_factory) -> TranslationDataModule:
    """Multi30k with an 8000-type BPE, trained once per test session."""
    dm = TranslationDataModule(
        source="multi30k",
        data_dir=str(multi30k_dir),
        vocab_size=8000,
        max_tokens=4096,
        cache_dir=str(tmp_path_factory.mktemp("multi30k_cache")),
    )
    dm.prepare_data()
    dm.setup(None)
    return dm
