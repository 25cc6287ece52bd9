"""Reading parallel corpora: WMT16 from the Hub, WMT16-schema files, Multi30k-layout text.

Every source yields, per logical split (``train``/``val``/``test``), a :class:`ParallelSplit`
that can fingerprint its content cheaply and read its sentence pairs on demand. All problems a
user can fix raise :class:`~transformer_nmt.data.errors.DataError` naming the path and the fix.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from transformer_nmt.data.errors import DataError
from transformer_nmt.data.fingerprints import file_digest, fingerprint
from transformer_nmt.private_api import dataset_fingerprint

SOURCES = ("hub", "text_files", "wmt16_files")
LOGICAL_SPLITS = ("train", "val", "test")
_DATASETS_SPLITS = {"train": "train", "val": "validation", "test": "test"}
_TEXT_FILES_SPLITS = {"train": "train", "val": "val", "test": "test"}
_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}
_COMPRESSION_SUFFIXES = (".gz", ".bz2", ".xz", ".zst")

LOCAL_DATA_HINT = (
    "to use local data instead, set data=text_files data.data_dir=/path/to/dir (files "
    "{split}.{lang}[.gz], one sentence per line) or data=wmt16_files "
    "data.data_files.train=/path/train.jsonl (rows {'translation': {'de': ..., 'en': ...}})"
)


class ParallelSplit(Protocol):
    """One split of a parallel corpus in a fixed language direction."""

    description: str

    def fingerprint(self) -> str:
        """A digest that changes whenever the split's content or direction changes."""
        ...

    def read(self) -> tuple[list[str], list[str]]:
        """The (source sentences, target sentences) in corpus order, stripped."""
        ...


def resolve_splits(source: str, train_split: str, splits: Mapping[str, str] | None) -> dict:
    """Map the logical split names train/val/test to the source's physical split names."""
    defaults = dict(_TEXT_FILES_SPLITS if source == "text_files" else _DATASETS_SPLITS)
    defaults["train"] = train_split
    unknown = sorted(set(splits or {}) - set(LOGICAL_SPLITS))
    if unknown:
        raise DataError(
            f"unknown logical split name(s) {unknown} in splits; the logical names are "
            f"{list(LOGICAL_SPLITS)}, e.g. splits={{'test': 'test_2016_flickr'}}"
        )
    return {**defaults, **dict(splits or {})}


@dataclass(frozen=True)
class TextFilesSplit:
    """A split stored as two line-aligned text files ``{split}.{lang}`` or ``{split}.{lang}.gz``."""

    src_path: Path
    tgt_path: Path

    @property
    def description(self) -> str:
        return f"{self.src_path} + {self.tgt_path}"

    def fingerprint(self) -> str:
        return fingerprint("text", file_digest(self.src_path), file_digest(self.tgt_path))

    def read(self) -> tuple[list[str], list[str]]:
        src, tgt = read_lines(self.src_path), read_lines(self.tgt_path)
        if len(src) != len(tgt):
            raise DataError(
                f"line counts differ: {self.src_path} has {len(src)} lines but {self.tgt_path} "
                f"has {len(tgt)}; the two languages of a split must be line-aligned"
            )
        return src, tgt


def read_lines(path: Path) -> list[str]:
    """Lines of a UTF-8 text file (gzip if it ends in .gz), split on ``\\n`` only, stripped.

    ``str.splitlines`` is avoided on purpose: it also splits on U+2028, U+0085 and friends,
    which occur inside sentences and would break the line alignment of the two languages.
    """
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", newline="") as handle:
        text = handle.read()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.strip() for line in lines]


def open_text_files_split(
    data_dir: Path, split: str, src_lang: str, tgt_lang: str
) -> TextFilesSplit:
    """Find the two files of ``split`` in a Multi30k-layout directory or say what is missing."""
    layout = (
        f"expected a directory of line-aligned files named {{split}}.{{lang}} or "
        f"{{split}}.{{lang}}.gz, one sentence per line (e.g. {split}.{src_lang}.gz and "
        f"{split}.{tgt_lang}.gz)"
    )
    if not data_dir.is_dir():
        raise DataError(
            f"data directory {data_dir} does not exist; {layout}. Set data.data_dir (or "
            f"MULTI30K_DIR) to such a directory"
        )
    split_languages = _languages_of_split(data_dir, split)
    paths = []
    for lang in (src_lang, tgt_lang):
        path = _find_split_file(data_dir, split, lang)
        if path is not None:
            paths.append(path)
        elif split_languages:
            raise DataError(
                f"language {lang!r} is not in the data: {data_dir} has split {split!r} only in "
                f"{sorted(split_languages)}; set src_lang/tgt_lang to those languages"
            )
        else:
            present = sorted(p.name for p in data_dir.iterdir())[:12]
            raise DataError(
                f"missing split file {data_dir / f'{split}.{lang}'}[.gz]; {layout}. "
                f"The directory holds {present}; set data.splits if the split has another name"
            )
    return TextFilesSplit(*paths)


def _find_split_file(data_dir: Path, split: str, lang: str) -> Path | None:
    for name in (f"{split}.{lang}", f"{split}.{lang}.gz"):
        if (data_dir / name).is_file():
            return data_dir / name
    return None


def _languages_of_split(data_dir: Path, split: str) -> set[str]:
    pattern = re.compile(rf"^{re.escape(split)}\.([^.]+)(\.gz)?$")
    return {m.group(1) for p in data_dir.iterdir() if (m := pattern.match(p.name))}


@dataclass(frozen=True)
class DatasetSplit:
    """A split held by a ``datasets.Dataset`` with a WMT16-style ``translation`` column."""

    dataset: object
    src_lang: str
    tgt_lang: str
    description: str

    def fingerprint(self) -> str:
        return fingerprint(
            "datasets", dataset_fingerprint(self.dataset), self.src_lang, self.tgt_lang
        )

    def read(self) -> tuple[list[str], list[str]]:
        table = self.dataset.with_format("arrow")[:]
        pairs = table.column("translation").combine_chunks()
        src = [s.strip() for s in pairs.field(self.src_lang).to_pylist()]
        tgt = [t.strip() for t in pairs.field(self.tgt_lang).to_pylist()]
        return src, tgt


def open_hub_split(
    hub_name: str, hub_config: str, split: str, src_lang: str, tgt_lang: str
) -> DatasetSplit:
    """Load ``split`` (slicing like ``train[:10%]`` allowed) of a Hub translation dataset."""
    import datasets

    try:
        dataset = datasets.load_dataset(hub_name, hub_config, split=split)
    except (ConnectionError, TimeoutError, FileNotFoundError) as error:
        offline = " (offline mode is on)" if datasets.config.HF_HUB_OFFLINE else ""
        raise DataError(
            f"could not load {hub_name} ({hub_config}, split {split!r}) from the Hugging Face Hub"
            f"{offline} and no cached copy was found: {error}. Run once with network access to "
            f"cache it, or {LOCAL_DATA_HINT}"
        ) from error
    description = f"{hub_name}/{hub_config}[{split}]"
    return _checked_dataset_split(dataset, src_lang, tgt_lang, description)


def open_files_split(
    data_files: Mapping[str, object], split: str, src_lang: str, tgt_lang: str
) -> DatasetSplit:
    """Load ``split`` of local WMT16-schema jsonl/parquet files through ``datasets``."""
    import datasets

    name = re.match(r"^[^\[]+", split).group(0)
    if name not in data_files:
        raise DataError(
            f"data_files has no entry for split {name!r} (has {sorted(data_files)}); expected "
            f"{{'train': path, 'validation': path, 'test': path}} of jsonl or parquet files"
        )
    entry = data_files[name]
    paths = [Path(p) for p in ([entry] if isinstance(entry, str | Path) else entry)]
    for path in paths:
        if not path.is_file():
            raise DataError(
                f"data file {path} for split {name!r} does not exist; expected jsonl or parquet "
                f"rows of {{'translation': {{'{src_lang}': ..., '{tgt_lang}': ...}}}}"
            )
    dataset = datasets.load_dataset(
        _file_builder(paths[0]), data_files={name: [str(p) for p in paths]}, split=split
    )
    description = f"{', '.join(map(str, paths))}[{split}]"
    return _checked_dataset_split(dataset, src_lang, tgt_lang, description)


def _file_builder(path: Path) -> str:
    suffixes = [s for s in path.suffixes if s not in _COMPRESSION_SUFFIXES]
    builder = _FILE_BUILDERS.get(suffixes[-1] if suffixes else "")
    if builder is None:
        raise DataError(
            f"cannot tell the format of {path}: data_files must end in .jsonl, .json or .parquet"
        )
    return builder


def _checked_dataset_split(
    dataset: object, src_lang: str, tgt_lang: str, description: str
) -> DatasetSplit:
    """Check the ``translation`` column holds both languages before anything reads it."""
    features = dataset.features
    if "translation" not in features:
        raise DataError(
            f"{description} has columns {sorted(features)} but needs a 'translation' column "
            f"of rows {{'translation': {{'{src_lang}': ..., '{tgt_lang}': ...}}}}"
        )
    column = features["translation"]
    languages = list(getattr(column, "languages", None) or column.keys())
    for lang in (src_lang, tgt_lang):
        if lang not in languages:
            raise DataError(
                f"language {lang!r} is not in the data: {description} has languages "
                f"{sorted(languages)}; set src_lang/tgt_lang to those languages"
            )
    return DatasetSplit(dataset, src_lang, tgt_lang, description)
