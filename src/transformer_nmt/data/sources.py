"""Reading parallel corpora: WMT16 from the Hub, WMT16-schema files, Multi30k-layout text.

Every source yields, per logical split (``train``/``val``/``test``), a :class:`ParallelSplit`
that can fingerprint its content cheaply and stream its sentence pairs in chunks, so that no
step of the pipeline holds a whole corpus as Python strings. All problems a user can fix raise
:class:`~transformer_nmt.data.errors.DataError` naming the path (and line) and the fix.
"""

from __future__ import annotations

import gzip
import itertools
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from transformer_nmt.data.errors import DataError
from transformer_nmt.data.fingerprints import file_digest, fingerprint
from transformer_nmt.private_api import dataset_fingerprint

SOURCES = ("hub", "multi30k", "text_files", "wmt16_files")
LOGICAL_SPLITS = ("train", "val", "test")
CHUNK_PAIRS = 50_000  # sentence pairs per chunk when streaming a split
_DATASETS_SPLITS = {"train": "train", "val": "validation", "test": "test"}
_TEXT_FILES_SPLITS = {"train": "train", "val": "val", "test": "test"}
_MULTI30K_SPLITS = {"train": "train", "val": "val", "test": "test_2016_flickr"}
_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}
_COMPRESSION_SUFFIXES = (".gz", ".bz2", ".xz", ".zst")
_READ_BYTES = 1 << 20  # decompressed bytes per read: a corrupt spot is placed within this
_GZIP_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)

LOCAL_DATA_HINT = (
    "to use local data instead, set data=text_files data.data_dir=/path/to/dir (files "
    "{split}.{lang}[.gz], one sentence per line) or data=wmt16_files "
    "data.data_files.train=/path/train.jsonl (rows {'translation': {'de': ..., 'en': ...}})"
)

Chunk = tuple[list[str], list[str]]


class ParallelSplit:
    """One split of a parallel corpus in a fixed language direction."""

    description: str

    def fingerprint(self) -> str:
        """A digest that changes whenever the split's content or direction changes."""
        raise NotImplementedError

    def chunks(self, size: int | None = None) -> Iterator[Chunk]:
        """(source sentences, target sentences), stripped, in corpus order, ``size`` (default
        :data:`CHUNK_PAIRS`) pairs at a time; the last chunk may be shorter."""
        raise NotImplementedError

    def count_pairs(self) -> int:
        """How many pairs the split holds (may read the split once)."""
        raise NotImplementedError

    def read(self) -> Chunk:
        """All (source sentences, target sentences) at once: for evaluation splits."""
        src: list[str] = []
        tgt: list[str] = []
        for src_chunk, tgt_chunk in self.chunks():
            src.extend(src_chunk)
            tgt.extend(tgt_chunk)
        return src, tgt

    def sample_chunks(self, pairs: int | None, seed: int = 0) -> Iterator[Chunk]:
        """Like :meth:`chunks`, but only a uniform random sample of ``pairs`` pairs (in corpus
        order; the same for the same seed), or every pair if ``pairs`` is None or not fewer."""
        total = self.count_pairs() if pairs is not None else 0
        if pairs is None or total <= pairs:
            yield from self.chunks()
            return
        chosen = np.sort(np.random.default_rng(seed).choice(total, size=pairs, replace=False))
        yield from self._chunks_of(chosen)

    def _chunks_of(self, chosen: np.ndarray) -> Iterator[Chunk]:
        """The pairs at the sorted positions ``chosen``, in chunks."""
        start = 0
        for src, tgt in self.chunks():
            lo, hi = np.searchsorted(chosen, [start, start + len(src)])
            picked = (chosen[lo:hi] - start).tolist()
            start += len(src)
            if picked:
                yield [src[i] for i in picked], [tgt[i] for i in picked]


def resolve_splits(
    source: str, train_split: str, splits: Mapping[str, str | None] | None
) -> dict[str, str]:
    """Map the logical split names train/val/test to the source's physical split names; a
    split that ``splits`` leaves out (or null) keeps the source's own name."""
    defaults = {"text_files": _TEXT_FILES_SPLITS, "multi30k": _MULTI30K_SPLITS}.get(
        source, _DATASETS_SPLITS
    )
    defaults = {**defaults, "train": train_split}
    unknown = sorted(set(splits or {}) - set(LOGICAL_SPLITS))
    if unknown:
        raise DataError(
            f"unknown logical split name(s) {unknown} in splits; the logical names are "
            f"{list(LOGICAL_SPLITS)}, e.g. splits={{'test': 'test_2016_flickr'}}"
        )
    chosen = {split: name for split, name in (splits or {}).items() if name is not None}
    return {**defaults, **chosen}


@dataclass(frozen=True)
class TextFilesSplit(ParallelSplit):
    """A split stored as two line-aligned text files ``{split}.{lang}`` or ``{split}.{lang}.gz``."""

    src_path: Path
    tgt_path: Path

    @property
    def description(self) -> str:
        return f"{self.src_path} + {self.tgt_path}"

    def fingerprint(self) -> str:
        return fingerprint("text", file_digest(self.src_path), file_digest(self.tgt_path))

    def count_pairs(self) -> int:
        return sum(map(len, line_chunks(self.src_path)))

    def chunks(self, size: int | None = None) -> Iterator[Chunk]:
        size = size or CHUNK_PAIRS
        src_chunks = _rechunk(line_chunks(self.src_path), size)
        tgt_chunks = _rechunk(line_chunks(self.tgt_path), size)
        done = 0
        for src, tgt in itertools.zip_longest(src_chunks, tgt_chunks, fillvalue=[]):
            if len(src) != len(tgt):
                src_total = done + len(src) + sum(map(len, src_chunks))
                tgt_total = done + len(tgt) + sum(map(len, tgt_chunks))
                raise DataError(
                    f"line counts differ: {self.src_path} has {src_total} lines but "
                    f"{self.tgt_path} has {tgt_total}; the two languages of a split must be "
                    f"line-aligned"
                )
            done += len(src)
            yield src, tgt


def line_chunks(path: Path) -> Iterator[list[str]]:
    """The lines of a UTF-8 text file (gzip if it ends in .gz), split on ``\\n`` only and
    stripped, a block at a time.

    ``str.splitlines`` is avoided on purpose: it also splits on U+2028, U+0085 and friends,
    which occur inside sentences and would break the line alignment of the two languages. A
    truncated or corrupt gzip file and bytes that are not UTF-8 raise :class:`DataError` naming
    the file and the line.
    """
    opener = gzip.open if path.suffix == ".gz" else open
    lines_done, pending = 0, b""
    with opener(path, "rb") as handle:
        while True:
            try:
                block = handle.read(_READ_BYTES)
            except _GZIP_ERRORS as error:
                raise DataError(
                    f"cannot read {path} past line {lines_done}: the file is truncated or "
                    f"corrupt ({error}); download or compress it again"
                ) from error
            if not block:
                break
            data = pending + block
            cut = data.rfind(b"\n") + 1
            if cut:
                yield _decoded_lines(path, data[:cut], lines_done)
                lines_done += data.count(b"\n", 0, cut)
            pending = data[cut:]
    if pending:
        yield _decoded_lines(path, pending + b"\n", lines_done)


def _decoded_lines(path: Path, data: bytes, lines_before: int) -> list[str]:
    """Lines of ``data`` (which ends in a newline), decoded and stripped."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = lines_before + data.count(b"\n", 0, error.start) + 1
        bad = error.object[error.start : error.end]
        raise DataError(
            f"{path} line {line} is not UTF-8 ({error.reason}: {bad!r}); convert the file to "
            f"UTF-8, e.g. with iconv -f latin1 -t utf-8"
        ) from error
    lines = text.split("\n")
    lines.pop()  # the empty string after the final newline
    return [line.strip() for line in lines]


def read_lines(path: Path) -> list[str]:
    """All lines of a text file at once (see :func:`line_chunks`)."""
    return list(itertools.chain.from_iterable(line_chunks(path)))


def _rechunk(chunks: Iterable[list], size: int) -> Iterator[list]:
    """The items of ``chunks`` again, ``size`` at a time (the last chunk may be shorter)."""
    buffer: list = []
    for chunk in chunks:
        buffer.extend(chunk)
        while len(buffer) >= size:
            yield buffer[:size]
            del buffer[:size]
    if buffer:
        yield buffer


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
class DatasetSplit(ParallelSplit):
    """A split held by a ``datasets.Dataset`` with a WMT16-style ``translation`` column."""

    dataset: object
    src_lang: str
    tgt_lang: str
    description: str

    def fingerprint(self) -> str:
        return fingerprint(
            "datasets", dataset_fingerprint(self.dataset), self.src_lang, self.tgt_lang
        )

    def count_pairs(self) -> int:
        return len(self.dataset)

    def chunks(self, size: int | None = None) -> Iterator[Chunk]:
        return self._chunks_of_dataset(self.dataset, size)

    def _chunks_of(self, chosen: np.ndarray) -> Iterator[Chunk]:
        return self._chunks_of_dataset(self.dataset.select(chosen))

    def _chunks_of_dataset(self, dataset, size: int | None = None) -> Iterator[Chunk]:
        for table in dataset.with_format("arrow").iter(batch_size=size or CHUNK_PAIRS):
            pairs = table.column("translation").combine_chunks()
            src = [(s or "").strip() for s in pairs.field(self.src_lang).to_pylist()]
            tgt = [(t or "").strip() for t in pairs.field(self.tgt_lang).to_pylist()]
            yield src, tgt


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
) -> FilesSplit:
    """``split`` of local WMT16-schema jsonl/parquet files (read through ``datasets`` when its
    text is first needed)."""
    name = re.match(r"^[^\[]+", split).group(0)
    if name not in data_files:
        raise DataError(
            f"data_files has no entry for split {name!r} (has {sorted(data_files)}); expected "
            f"{{'train': path, 'validation': path, 'test': path}} of jsonl or parquet files"
        )
    entry = data_files[name]
    paths = tuple(Path(p) for p in ([entry] if isinstance(entry, str | Path) else entry))
    for path in paths:
        if not path.is_file():
            raise DataError(
                f"data file {path} for split {name!r} does not exist; expected jsonl or parquet "
                f"rows of {{'translation': {{'{src_lang}': ..., '{tgt_lang}': ...}}}}"
            )
    _file_builder(paths[0])  # a format it cannot read: the error now, not after the BPE
    return FilesSplit(paths, name, split, src_lang, tgt_lang)


@dataclass(frozen=True)
class FilesSplit(ParallelSplit):
    """A split of local WMT16-schema files. Its fingerprint is the files' paths, sizes and
    modification times (what ``datasets`` keys local files by), so a run whose cache is built
    never loads ``datasets``, its arrow copy of the corpus or their memory."""

    paths: tuple[Path, ...]
    name: str  # the data_files entry
    split: str  # the entry, or a slice of it: "train[:10%]"
    src_lang: str
    tgt_lang: str

    @property
    def description(self) -> str:
        return f"{', '.join(map(str, self.paths))}[{self.split}]"

    def fingerprint(self) -> str:
        stats = [
            (str(p.resolve()), st.st_size, st.st_mtime_ns) for p in self.paths for st in [p.stat()]
        ]
        return fingerprint("files", stats, self.split, self.src_lang, self.tgt_lang)

    def count_pairs(self) -> int:
        return self._dataset.count_pairs()

    def chunks(self, size: int | None = None) -> Iterator[Chunk]:
        return self._dataset.chunks(size)

    def _chunks_of(self, chosen: np.ndarray) -> Iterator[Chunk]:
        return self._dataset._chunks_of(chosen)

    @cached_property
    def _dataset(self) -> DatasetSplit:
        import datasets

        dataset = datasets.load_dataset(
            _file_builder(self.paths[0]),
            data_files={self.name: [str(p) for p in self.paths]},
            split=self.split,
        )
        return _checked_dataset_split(dataset, self.src_lang, self.tgt_lang, self.description)


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
