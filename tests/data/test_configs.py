"""The Hydra `data` group configs build the datamodule with every constructor argument."""

import inspect
from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from tests.data.conftest import REPO_ROOT
from transformer_nmt.data import TranslationDataModule

CONFIG_DIR = REPO_ROOT / "conf" / "data"
PARAMETERS = set(inspect.signature(TranslationDataModule).parameters)


@pytest.mark.parametrize("name", ["wmt16", "multi30k", "wmt16_local"])
def test_config_sets_every_argument_and_instantiates(name, monkeypatch, tmp_path):
    monkeypatch.setenv("TRANSFORMER_NMT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MULTI30K_DIR", str(tmp_path / "multi30k"))
    monkeypatch.setenv("WMT16_DIR", str(tmp_path / "wmt16"))
    config = OmegaConf.load(CONFIG_DIR / f"{name}.yaml")
    assert set(config) - {"_target_", "_convert_"} == PARAMETERS
    dm = instantiate(config)
    assert isinstance(dm, TranslationDataModule)
    assert dm.cache_dir == tmp_path / "cache"
    if name == "multi30k":
        assert dm.data_dir == tmp_path / "multi30k"
        assert dm.physical_splits == {"train": "train", "val": "val", "test": "test_2016_flickr"}
    if name == "wmt16_local":
        assert dm.data_files["validation"] == str(tmp_path / "wmt16" / "validation.jsonl")
    if name == "wmt16":
        assert (dm.hub_name, dm.hub_config, dm.source) == ("wmt/wmt16", "de-en", "hub")


def test_default_cache_dir_expands_home(monkeypatch):
    monkeypatch.delenv("TRANSFORMER_NMT_CACHE", raising=False)
    dm = instantiate(OmegaConf.load(CONFIG_DIR / "wmt16.yaml"))
    assert dm.cache_dir == Path.home() / ".cache" / "transformer_nmt"
