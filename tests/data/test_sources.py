"""Reading the three kinds of source, and the errors for data that cannot be used."""

import gzip
import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers.corpus import write_lines
from transformer_nmt.data import DataError, TranslationDataModule, sources
from transformer_nmt.data.sources import open_text_files_split, read_lines


def test_local_source_reads_gzip_and_plain_files_in_order(make_dm, tiny_pairs):
    dm = make_dm(src_lang="en", tgt_lang="de")
    for split in ("train", "val", "test"):  # train is .gz, val/test are plain text
        assert dm.raw_pairs(split) == tiny_pairs[split]


def test_direction_is_configuration(make_dm, tiny_pairs):
    dm = make_dm(src_lang="de", tgt_lang="en")
    assert dm.raw_pairs("val") == [(de, en) for en, de in tiny_pairs["val"]]


def test_lines_split_only_on_newline(tmp_path):
    path = tmp_path / "x.en"
    path.write_text("first\u2028still first\r\nsecond\x85too\n", encoding="utf-8")
    assert read_lines(path) == ["first\u2028still first", "second\x85too"]


def test_missing_directory_names_path_and_layout(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(DataError, match="does not exist") as error:
        open_text_files_split(missing, "train", "en", "de")
    assert str(missing) in str(error.value)
    assert "{split}.{lang}.gz" in str(error.value)


def test_missing_split_file_names_path_and_layout(make_dm, tiny_dir):
    dm = make_dm(splits={"test": "test_2016_flickr"})
    with pytest.raises(DataError, match="missing split file") as error:
        dm.setup("test")
    message = str(error.value)
    assert str(tiny_dir / "test_2016_flickr.en") in message
    assert "{split}.{lang}.gz" in message


def test_unequal_line_counts_name_both_files_and_counts(make_dm, tiny_dir, tiny_pairs):
    write_lines(tiny_dir / "val.de", [de for _, de in tiny_pairs["val"]][:-2])
    dm = make_dm()
    with pytest.raises(DataError, match="line counts differ") as error:
        dm.setup("validate")
    message = str(error.value)
    assert str(tiny_dir / "val.en") in message and str(tiny_dir / "val.de") in message
    assert "30 lines" in message and "has 28" in message


def test_language_not_in_local_data(make_dm):
    dm = make_dm(src_lang="en", tgt_lang="fr")
    with pytest.raises(DataError, match="language 'fr' is not in the data") as error:
        dm.setup("fit")
    assert "['de', 'en']" in str(error.value)


def test_wmt16_jsonl_goes_through_datasets(wmt16_jsonl, tiny_pairs, fresh_cache_dir):
    dm = TranslationDataModule(
        source="wmt16_files",
        data_files=wmt16_jsonl,
        train_split="train[:50%]",
        vocab_size=200,
        max_len=32,
        max_tokens=256,
        cache_dir=str(fresh_cache_dir),
    )
    dm.setup("fit")
    assert dm.raw_pairs("train") == tiny_pairs["train"][:120]
    assert dm.raw_pairs("val") == tiny_pairs["val"]
    assert dm.raw_pairs("test") == tiny_pairs["test"]
    assert len(dm.datasets["train"]) == 118  # the half-empty and the over-long pair are dropped
    batch = next(iter(dm.train_dataloader()))
    assert batch["src_ids"].shape[0] == batch["labels"].shape[0] > 0


def test_wmt16_parquet_files_and_reverse_direction(tmp_path, tiny_pairs, fresh_cache_dir):
    rows = [{"translation": {"de": de, "en": en}} for en, de in tiny_pairs["val"]]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "validation.parquet")
    dm = TranslationDataModule(
        source="wmt16_files",
        data_files={"validation": str(tmp_path / "validation.parquet")},
        src_lang="de",
        tgt_lang="en",
        cache_dir=str(fresh_cache_dir),
    )
    assert dm.raw_pairs("val") == [(de, en) for en, de in tiny_pairs["val"]]


def test_language_not_in_wmt16_files(wmt16_jsonl, fresh_cache_dir):
    dm = TranslationDataModule(
        source="wmt16_files", data_files=wmt16_jsonl, tgt_lang="ro", cache_dir=str(fresh_cache_dir)
    )
    with pytest.raises(DataError, match="language 'ro' is not in the data") as error:
        dm.raw_pairs("val")
    assert "['de', 'en']" in str(error.value)


def test_wmt16_files_missing_file_and_missing_split(tmp_path, wmt16_jsonl, fresh_cache_dir):
    missing = str(tmp_path / "absent.jsonl")
    dm = TranslationDataModule(
        source="wmt16_files",
        data_files={**wmt16_jsonl, "test": missing},
        cache_dir=str(fresh_cache_dir),
    )
    with pytest.raises(DataError, match="does not exist") as error:
        dm.raw_pairs("test")
    assert missing in str(error.value)
    dm = TranslationDataModule(
        source="wmt16_files",
        data_files={"train": wmt16_jsonl["train"]},
        cache_dir=str(fresh_cache_dir),
    )
    with pytest.raises(DataError, match="no entry for split 'validation'"):
        dm.raw_pairs("val")


def test_files_are_fingerprinted_by_path_size_mtime_slice_and_direction(wmt16_jsonl):
    path = wmt16_jsonl["train"]
    split = sources.open_files_split({"train": path}, "train", "en", "de")
    first = split.fingerprint()
    assert sources.open_files_split({"train": path}, "train", "en", "de").fingerprint() == first
    assert (
        sources.open_files_split({"train": path}, "train[:50%]", "en", "de").fingerprint() != first
    )
    assert sources.open_files_split({"train": path}, "train", "de", "en").fingerprint() != first
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"translation": {"de": "Noch einer.", "en": "One more."}}) + "\n")
    assert split.fingerprint() != first


@pytest.mark.slow  # starts a Python process
def test_a_warm_start_from_files_never_loads_datasets(wmt16_jsonl, fresh_cache_dir):
    options = dict(
        source="wmt16_files",
        data_files=wmt16_jsonl,
        vocab_size=200,
        max_len=32,
        max_tokens=256,
        cache_dir=str(fresh_cache_dir),
    )
    built = TranslationDataModule(**options)
    built.setup("fit")  # trains the tokenizer and fills the cache
    warm_start = (
        "import sys\n"
        "from transformer_nmt.data import TranslationDataModule\n"
        f"dm = TranslationDataModule(**{options!r})\n"
        "dm.setup('fit')\n"
        "print(len(dm.datasets['train']), 'datasets' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", warm_start], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == [str(len(built.datasets["train"])), "False"]


def test_rows_without_translation_column(tmp_path, fresh_cache_dir):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"en": "Hello.", "de": "Hallo."}) + "\n")
    dm = TranslationDataModule(
        source="wmt16_files", data_files={"train": str(path)}, cache_dir=str(fresh_cache_dir)
    )
    with pytest.raises(DataError, match="needs a 'translation' column"):
        dm.raw_pairs("train")


def test_hub_without_network_or_cache_says_how_to_use_local_data(
    tmp_path, monkeypatch, fresh_cache_dir
):
    import datasets
    import huggingface_hub

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "empty_datasets")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty_hub"))
    dm = TranslationDataModule(source="hub", cache_dir=str(fresh_cache_dir))
    with pytest.raises(DataError, match="no cached copy") as error:
        dm.prepare_data()
    message = str(error.value)
    assert "wmt/wmt16" in message and "de-en" in message
    assert "data=text_files data.data_dir=" in message and "data=wmt16_files" in message
    assert isinstance(error.value.__cause__, ConnectionError)


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"source": "ftp"}, "unknown source"),
        ({"source": "text_files"}, "needs data_dir"),
        ({"source": "wmt16_files"}, "needs data_files"),
        ({"tokenizer": "pretrained"}, "needs tokenizer_name"),
        ({"max_tokens": None, "batch_size": None}, "set max_tokens"),
        ({"max_tokens": 100, "max_len": 256}, "at least max_len"),
        ({"splits": {"dev": "val"}}, "unknown logical split"),
        ({"overlong": "cut"}, "unknown overlong='cut'"),
        ({"bpe_sample_pairs": 0}, "bpe_sample_pairs=0"),
        ({"min_train_pairs": -1}, "min_train_pairs=-1"),
    ],
)
def test_bad_options_fail_at_construction(options, fragment):
    with pytest.raises(DataError, match=fragment):
        TranslationDataModule(**options)


def _gzip_lines(lines: list[str]) -> bytes:
    return gzip.compress("".join(f"{line}\n" for line in lines).encode())


@pytest.mark.parametrize("damage", ["truncated", "bad CRC", "not gzip"])
def test_corrupt_gzip_names_file_and_line_in_training_and_evaluation(
    make_dm, tiny_dir, tiny_pairs, damage
):
    lines = [de for _, de in tiny_pairs["train"]]
    data = _gzip_lines(lines)
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "bad CRC":
        data = data[:-8] + bytes([data[-8] ^ 0xFF]) + data[-7:]
    else:
        data = b"plain text, not gzip\n" * 10
    path = tiny_dir / "train.de.gz"
    path.write_bytes(data)
    with pytest.raises(DataError, match="truncated or corrupt") as error:
        make_dm().setup("fit")
    assert f"cannot read {path} past line" in str(error.value)
    (tiny_dir / "test.de").unlink()
    (tiny_dir / "test.de.gz").write_bytes(data)  # what evaluate.py reads
    with pytest.raises(DataError, match=r"test\.de\.gz past line \d+"):
        make_dm().raw_pairs("test")


def test_non_utf8_line_is_named_in_training_and_evaluation(make_dm, tiny_dir, tiny_pairs):
    lines = [de.encode() for _, de in tiny_pairs["val"]]
    lines[16] = "Ein Mädchen.".encode("latin-1")
    (tiny_dir / "val.de").write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(DataError, match=r"val\.de line 17 is not UTF-8") as error:
        make_dm().setup("fit")
    assert "iconv" in str(error.value)
    with pytest.raises(DataError, match=r"val\.de line 17 is not UTF-8"):
        make_dm().raw_pairs("val")


def test_lines_stream_in_blocks_across_chunk_borders(tmp_path, monkeypatch):
    lines = [f"line {i} ü" for i in range(1000)]
    path = tmp_path / "many.de.gz"
    path.write_bytes(_gzip_lines(lines))
    monkeypatch.setattr(sources, "_READ_BYTES", 7)  # blocks end inside lines and characters
    assert read_lines(path) == lines
    split = open_text_files_split(tmp_path, "many", "de", "de")
    assert [len(src) for src, _ in split.chunks(300)] == [300, 300, 300, 100]


def _pairs(chunks) -> list[tuple[str, str]]:
    return [pair for src, tgt in chunks for pair in zip(src, tgt, strict=True)]


@pytest.mark.parametrize("source", ["text_files", "wmt16_files"])
def test_a_sample_is_uniform_reproducible_and_in_corpus_order(
    source, tiny_dir, wmt16_jsonl, tiny_pairs, monkeypatch
):
    if source == "text_files":
        split = open_text_files_split(tiny_dir, "train", "en", "de")
    else:
        split = sources.open_files_split(wmt16_jsonl, "train", "en", "de")
    monkeypatch.setattr(sources, "CHUNK_PAIRS", 64)
    assert split.count_pairs() == 240
    chosen = np.sort(np.random.default_rng(3).choice(240, size=100, replace=False))
    sample = _pairs(split.sample_chunks(100, seed=3))
    assert sample == [tiny_pairs["train"][i] for i in chosen]
    assert _pairs(split.sample_chunks(240)) == tiny_pairs["train"]
