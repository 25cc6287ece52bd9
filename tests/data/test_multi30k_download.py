"""source=multi30k without a data directory: the download into the cache, its checks, offline.

The network is never used: ``urllib.request.urlopen`` serves files from a local directory.
"""

import gzip
import hashlib
import io
import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest

from tests.helpers.corpus import make_pairs, write_lines
from tests.helpers.run_if import run_if
from transformer_nmt.atomic import is_complete
from transformer_nmt.data import DataError, TranslationDataModule, multi30k

SMALL_SPLITS = {"train": 120, "val": 6, "test_2016_flickr": 5, "test_2017_flickr": 5}
SMALL_SPLITS |= {"test_2017_mscoco": 4, "test_2018_flickr": 3}


@pytest.fixture
def served(tmp_path, monkeypatch):
    """A stand-in for raw.githubusercontent.com: small Multi30k-like files in ``.directory``,
    with their sums pinned in place of the real ones; ``.fetched`` lists the URLs fetched."""
    origin = tmp_path / "origin"
    origin.mkdir()
    sums = {}
    for seed, (split, pairs) in enumerate(SMALL_SPLITS.items()):
        sentences = make_pairs(pairs, seed)
        for index, lang in enumerate(multi30k.LANGUAGES):
            path = origin / f"{split}.{lang}.gz"
            write_lines(path, [pair[index] for pair in sentences])
            sums[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    monkeypatch.setattr(multi30k, "SPLITS", SMALL_SPLITS)
    monkeypatch.setattr(multi30k, "SHA256", sums)
    for variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(variable, raising=False)
    fetched = []

    def urlopen(url, timeout=None):
        fetched.append(url)
        assert url.startswith(multi30k.BASE_URL + "/")
        return io.BytesIO((origin / url.rsplit("/", 1)[1]).read_bytes())

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    return SimpleNamespace(directory=origin, fetched=fetched)


def _dm(cache_dir, **options) -> TranslationDataModule:
    return TranslationDataModule(
        source="multi30k", vocab_size=200, max_tokens=256, cache_dir=str(cache_dir), **options
    )


def test_download_is_verified_published_once_and_every_test_set_selectable(served, fresh_cache_dir):
    dm = _dm(fresh_cache_dir, splits={"test": "test_2017_mscoco"})
    dm.setup(None)
    assert len(served.fetched) == 12
    entry = fresh_cache_dir / "multi30k" / f"task1-raw-{multi30k.COMMIT[:12]}"
    assert is_complete(entry)
    assert sorted(p.name for p in entry.iterdir()) == sorted([*multi30k.file_names(), "COMPLETE"])
    assert len(dm.datasets["test"]) == SMALL_SPLITS["test_2017_mscoco"]
    assert len(dm.raw_pairs("val")) == SMALL_SPLITS["val"]
    _dm(fresh_cache_dir, splits={"test": "test_2018_flickr"}).setup("test")
    assert len(served.fetched) == 12  # the second run reads the cache


@pytest.mark.parametrize("damage", ["bytes", "line count"])
def test_a_wrong_file_is_named_and_nothing_is_published(
    served, fresh_cache_dir, monkeypatch, damage
):
    name = "val.de.gz"
    if damage == "bytes":
        (served.directory / name).write_bytes(gzip.compress(b"tampered\n"))
        fragment = f"downloaded {name} has sha256"
    else:
        monkeypatch.setitem(multi30k.SPLITS, "val", 7)
        fragment = "downloaded val.en.gz has 6 lines, expected 7"
    with pytest.raises(DataError, match=fragment) as error:
        _dm(fresh_cache_dir).prepare_data()
    assert "nothing was saved" in str(error.value) and "data.data_dir" in str(error.value)
    assert [p.name for p in (fresh_cache_dir / "multi30k").iterdir()] == [
        f".task1-raw-{multi30k.COMMIT[:12]}.lock"
    ]


def test_offline_without_cache_says_how_to_get_the_files(fresh_cache_dir, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError, match="downloads are off") as error:
        _dm(fresh_cache_dir).prepare_data()
    message = str(error.value)
    assert "data.data_dir" in message and "MULTI30K_DIR" in message
    assert multi30k.REPOSITORY in message and "data/task1/raw" in message


def test_network_failure_says_how_to_get_the_files(fresh_cache_dir, monkeypatch):
    for variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(variable, raising=False)

    def unreachable(url, timeout=None):
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.setattr(urllib.request, "urlopen", unreachable)
    with pytest.raises(DataError, match="could not download .*train.en.gz") as error:
        _dm(fresh_cache_dir).prepare_data()
    assert "data.data_dir" in str(error.value)
    assert not (fresh_cache_dir / "multi30k" / f"task1-raw-{multi30k.COMMIT[:12]}").exists()


def test_data_dir_is_read_without_download(make_dm, tiny_dir, tiny_pairs, monkeypatch):
    def no_download(url, timeout=None):
        raise AssertionError(f"downloaded {url} although data_dir is set")

    monkeypatch.setattr(urllib.request, "urlopen", no_download)
    dm = make_dm(source="multi30k", splits={"test": "test"})
    assert dm.raw_pairs("val") == tiny_pairs["val"]


def test_unknown_multi30k_split_lists_the_real_ones():
    with pytest.raises(DataError, match="Multi30k has no split 'test_2019'") as error:
        TranslationDataModule(source="multi30k", splits={"test": "test_2019"})
    assert "test_2017_mscoco" in str(error.value)


@run_if(multi30k=True)
def test_pinned_sums_and_line_counts_match_the_real_files(multi30k_dir):
    present = [name for name in multi30k.file_names() if (multi30k_dir / name).is_file()]
    assert present, f"no Multi30k file in {multi30k_dir}"
    for name in present:
        data = (multi30k_dir / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == multi30k.SHA256[name], name
        split = name.split(".")[0]
        assert gzip.decompress(data).count(b"\n") == multi30k.SPLITS[split], name
