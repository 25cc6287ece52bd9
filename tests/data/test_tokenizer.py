"""BPE training and caching, pretrained (Marian-style) loading, special ids."""

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer, MarianConfig, PreTrainedTokenizerFast

from transformer_nmt.atomic import COMPLETE_MARKER, build_directory_atomically, is_complete
from transformer_nmt.data import DataError, load_tokenizer, special_ids
from transformer_nmt.data import tokenizer as tokenizer_module
from transformer_nmt.data.encoding import encode_texts, encode_to_arrays


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


def test_leftover_temp_dir_ignored_and_incomplete_entry_rebuilt(make_dm):
    entry = make_dm().tokenizer_dir
    entry_path = Path(entry)
    # a crashed writer's temp dir, and an entry that lost its marker (e.g. copied by hand)
    junk = entry_path.parent / f".tmp-{entry_path.name}-crashed"
    junk.mkdir()
    (junk / "tokenizer.json").write_text("{half a tokeni")
    (entry_path / COMPLETE_MARKER).unlink()
    (entry_path / "tokenizer.json").write_text("{half a tokeni")
    dm = make_dm()
    assert dm.tokenizer_dir == entry
    assert is_complete(entry_path)
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
    assert list((tmp_path / "entries").iterdir()) == []


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


def test_process_pool_encoding_matches_serial(make_dm, tiny_pairs, monkeypatch):
    from transformer_nmt.data import encoding

    tokenizer = make_dm().tokenizer
    texts = [en for en, _ in tiny_pairs["train"]]
    serial_tokens, serial_offsets = encode_to_arrays(tokenizer, texts)
    monkeypatch.setattr(encoding, "_CHUNK_SENTENCES", 50)
    pooled_tokens, pooled_offsets = encode_to_arrays(tokenizer, texts, num_proc=2)
    assert (pooled_tokens == serial_tokens).all() and (pooled_offsets == serial_offsets).all()
    assert len(serial_offsets) == len(texts) + 1
