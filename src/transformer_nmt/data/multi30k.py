"""Multi30k task 1 (English-German image captions, raw and cased), downloaded once into the cache.

The files come from the public ``multi30k/dataset`` repository at a pinned commit, so their
content is known: every file's sha256 and line count are checked before the directory is
published (atomically, with its ``COMPLETE`` marker), and a mismatch publishes nothing.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import urllib.error
import urllib.request
from pathlib import Path

from transformer_nmt.atomic import build_directory_atomically, is_complete
from transformer_nmt.data.errors import DataError

log = logging.getLogger(__name__)

COMMIT = "a3d2e0d26b56f3846f66a952536ffed4e401d05a"
REPOSITORY = "https://github.com/multi30k/dataset"
BASE_URL = f"https://raw.githubusercontent.com/multi30k/dataset/{COMMIT}/data/task1/raw"
LANGUAGES = ("en", "de")
# split -> pairs; the test sets of 2016 (the usual one), 2017 and 2018
SPLITS = {
    "train": 29000,
    "val": 1014,
    "test_2016_flickr": 1000,
    "test_2017_flickr": 1000,
    "test_2017_mscoco": 461,
    "test_2018_flickr": 1071,
}
SHA256 = {
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2017_flickr.en.gz": "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
    "test_2017_flickr.de.gz": "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
    "test_2017_mscoco.en.gz": "aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58",
    "test_2017_mscoco.de.gz": "799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338",
    "test_2018_flickr.en.gz": "ef4f4844037d4c5dea75c9a8ed5fd78905967a26f67c255e230cc9780032654d",
    "test_2018_flickr.de.gz": "ddd0130c7d97482dc5197a02141dae8dd79f20f03586c480d675c09a32daf608",
}
_TIMEOUT_S = 60
_OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


def file_names() -> list[str]:
    """The twelve files: ``{split}.{lang}.gz`` for every split and language."""
    return [f"{split}.{lang}.gz" for split in SPLITS for lang in LANGUAGES]


def manual_download_hint() -> str:
    return (
        f"set data.data_dir (or MULTI30K_DIR) to a directory holding Multi30k's "
        f"{{train,val,test_2016_flickr}}.{{en,de}}.gz, the files of {REPOSITORY} "
        f"(data/task1/raw), e.g. git clone --depth 1 {REPOSITORY}"
    )


def multi30k_dir(cache_dir: Path) -> Path:
    """The directory of Multi30k's files in the cache, downloaded and checked on first use."""
    entry = Path(cache_dir) / "multi30k" / f"task1-raw-{COMMIT[:12]}"
    if is_complete(entry):
        return entry
    offline = [name for name in _OFFLINE_VARIABLES if _is_true(os.environ.get(name))]
    if offline:
        raise DataError(
            f"Multi30k is not in the cache ({entry}) and downloads are off ({offline[0]}=1): "
            f"run once with network access to download it there, or {manual_download_hint()}"
        )
    log.info("downloading Multi30k task 1 (%d files) from %s into %s", len(SHA256), BASE_URL, entry)
    info = {"kind": "multi30k", "source": BASE_URL, "sha256": SHA256}
    return build_directory_atomically(entry, _download_all, info)


def _download_all(directory: Path) -> None:
    for split, pairs in SPLITS.items():
        for lang in LANGUAGES:
            name = f"{split}.{lang}.gz"
            data = _verified(name, download(f"{BASE_URL}/{name}"), pairs)
            (directory / name).write_bytes(data)


def download(url: str) -> bytes:
    """The bytes at ``url``; a network failure raises :class:`DataError` saying what to do."""
    try:
        with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response:
            return response.read()
    except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
        raise DataError(
            f"could not download {url} ({error}); with no network, {manual_download_hint()}"
        ) from error


def _verified(name: str, data: bytes, pairs: int) -> bytes:
    """``data`` if it is the pinned ``name`` (sha256, then line count), else a DataError."""
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256[name]:
        raise DataError(
            f"downloaded {name} has sha256 {digest}, expected {SHA256[name]} ({BASE_URL}/{name}); "
            f"nothing was saved. Try again, or {manual_download_hint()}"
        )
    lines = gzip.decompress(data).count(b"\n")
    if lines != pairs:
        raise DataError(
            f"downloaded {name} has {lines} lines, expected {pairs}; nothing was saved. "
            f"Try again, or {manual_download_hint()}"
        )
    return data


def _is_true(value: str | None) -> bool:
    return (value or "").strip().upper() in {"1", "ON", "YES", "TRUE"}
