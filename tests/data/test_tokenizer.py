"""BPE training and caching, pretrained (Marian-style) loading, special ids."""

import json
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from transformers import AutoTokenizer, MarianConfig, PreTrainedTokenizerFast

from tests.helpers.vocabulary import words_fused_with_punctuation
from transformer_nmt.atomic import COMPLETE_MARKER, build_directory_atomically, is_complete
from transformer_nmt.data import DataError, load_tokenizer, sources, special_ids
from transformer_nmt.data import tokenizer as tokenizer_module
from transformer_nmt.data.encoding import EncodedSplit, encode_split, encode_texts
from transformer_nmt.data.tokenizer import train_bpe


def test_bpe_round_trip_specials_and_reload(make_dm, tiny_pairs):
    dm = make_dm()
    assert isinstance(dm.tokenizer, PreTrainedTokenizerFast)
    assert dm.vocab_size == len(dm.tokenizer) <= 200
    ids = {dm.pad_id, dm.bos_id, dm.eos_id, dm.tokenizer.unk_token_id}
    assert len(ids) == 4 and max(ids) < dm.vocab_size
    for en, de in tiny_pairs["val"]:
        for text in (en, de):
            token_ids = encode_texts(dm.tokenizer, [text])[0]
            assert dm.tokenizer.unk_token_id not in token_ids
            assert dm.decode(token_ids + [dm.eos_id, dm.pad_id]) == text
    reloaded = load_tokenizer(dm.tokenizer_dir)
    assert special_ids(reloaded) == (dm.pad_id, dm.bos_id, dm.eos_id)
    auto = AutoTokenizer.from_pretrained(dm.tokenizer_dir)
    text = tiny_pairs["test"][0][0]
    assert (
        auto(text, add_special_tokens=False)["input_ids"] == encode_texts(dm.tokenizer, [text])[0]
    )


def test_second_run_reuses_cached_bpe(make_dm, monkeypatch):
    first = make_dm()
    first_dir = first.tokenizer_dir

    def no_training(*args, **kwargs):
        raise AssertionError("BPE was retrained despite a cache entry")

    monkeypatch.setattr(tokenizer_module, "train_bpe", no_training)
    second = make_dm(max_len=16, max_tokens=64)  # batching options do not change the key
    assert second.tokenizer_dir == first_dir
    assert second.tokenizer.get_vocab() == first.tokenizer.get_vocab()
    with pytest.raises(AssertionError, match="retrained"):
        make_dm(vocab_size=150).tokenizer  # noqa: B018 - another vocabulary size is another key


def test_killed_builders_temp_dir_removed_and_incomplete_entry_rebuilt(make_dm):
    entry = make_dm().tokenizer_dir
    entry_path = Path(entry)
    # a killed builder's temp dir, and an entry that lost its marker (e.g. copied by hand)
    junk = entry_path.parent / f".tmp-{entry_path.name}-killed"
    junk.mkdir()
    (junk / "tokenizer.json").write_text("{half a tokeni")
    (entry_path / COMPLETE_MARKER).unlink()
    (entry_path / "tokenizer.json").write_text("{half a tokeni")
    dm = make_dm()
    assert dm.tokenizer_dir == entry
    assert is_complete(entry_path)
    assert not junk.exists()
    assert json.loads((entry_path / "tokenizer.json").read_text())["model"]["type"] == "BPE"
    assert dm.vocab_size > 4


def test_failed_build_publishes_nothing(tmp_path):
    entry = tmp_path / "entries" / "thing"

    def crash(tmp_dir):
        (tmp_dir / "part.bin").write_bytes(b"half")
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError, match="mid-write"):
        build_directory_atomically(entry, crash)
    assert not entry.exists()
    assert [p.name for p in (tmp_path / "entries").iterdir()] == [".thing.lock"]


@pytest.fixture
def marian_like_dir(tmp_path, make_dm):
    """A local 'pretrained' tokenizer with no BOS and decoder_start = pad, like opus-mt."""
    bpe = make_dm().tokenizer
    directory = tmp_path / "opus-mt-like"
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe.backend_tokenizer,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
    )
    tokenizer.save_pretrained(directory)
    pad = tokenizer.pad_token_id
    MarianConfig(
        vocab_size=len(tokenizer), pad_token_id=pad, decoder_start_token_id=pad
    ).save_pretrained(directory)
    return directory


def test_pretrained_without_bos_uses_decoder_start_so_first_token_is_learned(
    make_dm, marian_like_dir
):
    assert AutoTokenizer.from_pretrained(marian_like_dir).bos_token_id is None
    dm = make_dm(tokenizer="pretrained", tokenizer_name=str(marian_like_dir))
    assert dm.bos_id == dm.pad_id
    assert dm.tokenizer_dir == str(marian_like_dir)
    batch = next(iter(dm.val_dataloader()))
    assert (batch["tgt_in_ids"][:, 0] == dm.pad_id).all()
    first_tokens = batch["labels"][:, 0]
    assert (first_tokens != dm.pad_id).all() and (first_tokens != dm.eos_id).all()
    assert (batch["tgt_in_ids"][:, 1] == first_tokens).all()
    assert special_ids(load_tokenizer(str(marian_like_dir))) == (dm.pad_id, dm.pad_id, dm.eos_id)


def test_pretrained_name_not_available_offline(make_dm):
    dm = make_dm(tokenizer="pretrained", tokenizer_name="Helsinki-NLP/opus-mt-xx-yy")
    with pytest.raises(DataError, match="cannot load tokenizer 'Helsinki-NLP/opus-mt-xx-yy'"):
        dm.tokenizer  # noqa: B018


def test_fast_path_matches_transformers_call(make_dm, tiny_pairs):
    tokenizer = make_dm().tokenizer
    texts = [de for _, de in tiny_pairs["train"][:50]]
    expected = tokenizer(text_target=texts, add_special_tokens=False)["input_ids"]
    assert encode_texts(tokenizer, texts, target=True) == expected


class PythonTokenizer:
    """A tokenizer without a Rust backend, like a slow (sentencepiece) one: encoded in a pool."""

    def __init__(self, fast) -> None:
        self.fast = fast

    def __len__(self) -> int:
        return len(self.fast)

    def __call__(self, **texts_and_options):
        return self.fast(**texts_and_options)


def test_process_pool_encoding_matches_serial(make_dm, tmp_path, monkeypatch):
    dm = make_dm()
    train = dm._split("train")
    encode_split(train, dm.tokenizer, tmp_path)
    serial = EncodedSplit.load(tmp_path)
    monkeypatch.setattr(sources, "CHUNK_PAIRS", 50)  # 5 chunks, encoded 2 at a time
    pooled_dir = tmp_path / "pooled"
    pooled_dir.mkdir()
    done = encode_split(train, PythonTokenizer(dm.tokenizer), pooled_dir, num_proc=2)
    pooled = EncodedSplit.load(pooled_dir)
    assert done["pairs"] == len(serial) == 240
    for name in EncodedSplit._FILES:
        assert np.array_equal(getattr(pooled, name), getattr(serial, name)), name
    assert serial.src_tokens.dtype == np.uint16


TRICKY = [
    '"Hello," she said -- (twice)... „Hallo“, sagte sie.',
    "U.S.-based e-mail: a@b.de, 3.5% of $1,000 in 1990s; 24/7?!",
    "Don't   stop  -  double  spaces;tabs\tand 'quotes'",
    "ﬁne ½ ＡＢＣ",  # NFKC: fine 1⁄2 ABC
    "...!?.",
    "Ein Mann (im Hintergrund) fährt Fahrrad.",
]


def test_punctuation_and_digits_are_pre_tokenised_apart_from_words(make_dm):
    tokenizer = make_dm().tokenizer
    assert words_fused_with_punctuation(tokenizer) == []  # no "▁dog." types
    pieces = tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str("12 (dogs).")
    assert [piece for piece, _ in pieces] == ["▁", "1", "2", "▁", "(", "dogs", ")", "."]


def test_decoding_inverts_encoding_exactly_on_tricky_strings():
    tokenizer = train_bpe([[unicodedata.normalize("NFKC", t) for t in TRICKY] * 3], 300)
    for text in TRICKY:
        ids = encode_texts(tokenizer, [text])[0]
        assert tokenizer.unk_token_id not in ids
        assert tokenizer.decode(ids) == unicodedata.normalize("NFKC", text)
