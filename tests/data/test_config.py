"""The Hydra `data` options compose onto the DataConfig schema and build the data module."""

from dataclasses import fields
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.helpers.hydra_config import compose_config
from transformer_nmt.data import DataConfig, DataError, TranslationDataModule


def compose_data(option: str, *overrides: str):
    return compose_config(f"data={option}", *overrides, return_hydra_config=True).data


@pytest.mark.parametrize("option", ["wmt16", "multi30k", "text_files", "wmt16_files"])
def test_every_option_is_the_schema_plus_its_changes(option, monkeypatch, tmp_path):
    monkeypatch.setenv("TRANSFORMER_NMT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MULTI30K_DIR", str(tmp_path / "multi30k"))
    monkeypatch.setenv("WMT16_DIR", str(tmp_path / "wmt16"))
    data = compose_data(option, "data.data_dir=/corpus" if option == "text_files" else "seed=0")
    assert list(data) == [f.name for f in fields(DataConfig)]
    dm = TranslationDataModule(OmegaConf.to_object(data))
    assert dm.cache_dir == tmp_path / "cache"
    if option == "multi30k":
        assert dm.data_dir == tmp_path / "multi30k" and dm.config.vocab_size == 8000
        assert dm.physical_splits == {"train": "train", "val": "val", "test": "test_2016_flickr"}
    if option == "wmt16_files":
        assert dm.data_files["validation"] == str(tmp_path / "wmt16" / "validation.jsonl")
    if option == "wmt16":
        assert OmegaConf.to_object(data) == DataConfig(seed=0)  # the schema's defaults


def test_multi30k_without_a_directory_is_downloaded_into_the_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("MULTI30K_DIR", raising=False)
    data = compose_data("multi30k", "data.splits.test=test_2018_flickr")
    dm = TranslationDataModule(OmegaConf.to_object(data), cache_dir=str(tmp_path))
    assert (dm.source, dm.data_dir) == ("multi30k", None)
    assert dm.physical_splits == {"train": "train", "val": "val", "test": "test_2018_flickr"}
    with pytest.raises(DataError, match="downloads are off"):  # the tests run offline
        dm.raw_pairs("test")


def test_an_unknown_or_mistyped_data_option_is_refused_at_composition():
    with pytest.raises(Exception, match="vocab_sizes"):
        compose_data("wmt16", "data.vocab_sizes=8000")
    with pytest.raises(Exception, match="vocab_size"):
        compose_data("wmt16", "data.vocab_size=many")


def test_default_cache_dir_expands_home(monkeypatch):
    monkeypatch.delenv("TRANSFORMER_NMT_CACHE", raising=False)
    dm = TranslationDataModule(OmegaConf.to_object(compose_data("wmt16")))
    assert dm.cache_dir == Path.home() / ".cache" / "transformer_nmt"
