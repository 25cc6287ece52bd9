"""The CTranslate2 export and the ``engine=ct2`` translator: float32 decodes as our search
does, int8 closely, for both norms and for shapes HF cannot hold."""

import json

import pytest
import torch

from tests.helpers.run_if import run_if
from tests.helpers.tiny_model import tiny_config
from tests.helpers.toy_checkpoint import train_toy_checkpoint
from transformer_nmt.decoding import SearchOptions, translate_token_ids
from transformer_nmt.export import UnsupportedModelError, export_ctranslate2
from transformer_nmt.export.ctranslate2 import check_ctranslate2_compatible
from transformer_nmt.export.verification import our_logits

NORMS = ("post", "pre")
pytestmark = run_if(package="ctranslate2")


def ct2(directory, **options):
    from transformer_nmt.evaluation import CTranslate2Translator

    return CTranslate2Translator(directory, SearchOptions(**options))


def ours(checkpoint, sources, **options) -> list[list[int]]:
    return translate_token_ids(
        checkpoint.model, sources, checkpoint.bos_id, checkpoint.eos_id, SearchOptions(**options)
    )


def sources_of(toy) -> list[list[int]]:
    from transformer_nmt.evaluation import Translator

    return Translator.from_checkpoint(toy.checkpoint).encode(toy.val_texts)


def gnmt_score(checkpoint, source: list[int], tokens: list[int], alpha: float) -> float:
    """Our model's log p(tokens + EOS | source) / ((5 + |Y|) / 6)^α."""
    labels = [*tokens, checkpoint.eos_id]
    logits = our_logits(
        checkpoint.model, torch.tensor([source]), torch.tensor([[checkpoint.bos_id, *tokens]])
    )
    log_prob = logits.log_softmax(-1)[0].gather(1, torch.tensor(labels)[:, None]).sum()
    return float(log_prob) / ((5 + len(labels)) / 6) ** alpha


@pytest.mark.slow
@pytest.mark.parametrize("norm", NORMS)
def test_directory_layout_and_config(norm, toys, ct2_dirs):
    directory = ct2_dirs[(norm, "float32")]
    assert {p.name for p in directory.iterdir()} == {
        "config.json",
        "model.bin",
        "shared_vocabulary.json",
        "tokenizer",
        "transformer_nmt.json",
    }
    config = json.loads((directory / "config.json").read_text())
    assert config["add_source_eos"] is True and config["add_source_bos"] is False
    assert config["decoder_start_token"] == "<s>" and config["layer_norm_epsilon"] == 1e-5
    tokenizer = toys[norm].checkpoint.tokenizer
    vocabulary = json.loads((directory / "shared_vocabulary.json").read_text())
    assert vocabulary == tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))


@pytest.mark.slow
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize(
    "limits", [dict(max_len_a=1.0, max_len_b=50), dict(max_len_a=0.5, max_len_b=2)]
)
def test_float32_greedy_equals_ours_token_for_token(norm, limits, toys, ct2_dirs):
    toy = toys[norm]
    sources = sources_of(toy)
    assert len(sources) >= 100
    expected = ours(toy.checkpoint, sources, beam_size=1, **limits)
    assert (
        ct2(ct2_dirs[(norm, "float32")], beam_size=1, **limits).translate_ids(sources) == expected
    )
    assert len({len(tokens) for tokens in expected}) > 2


@pytest.mark.slow
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_float32_beam4_equals_ours_but_for_near_ties(norm, alpha, toys, ct2_dirs):
    """Equal but where CTranslate2's renormalised probabilities (it suppresses pad and BOS
    before its softmax) flip a near-tie: then our model scores both outputs within 0.02."""
    toy = toys[norm]
    sources = sources_of(toy)
    options = dict(beam_size=4, length_penalty=alpha)
    expected = ours(toy.checkpoint, sources, **options)
    theirs = ct2(ct2_dirs[(norm, "float32")], **options).translate_ids(sources)
    different = [i for i, (a, b) in enumerate(zip(theirs, expected, strict=True)) if a != b]
    assert len(different) <= 0.02 * len(sources)
    for i in different:
        assert gnmt_score(toy.checkpoint, sources[i], theirs[i], alpha) == pytest.approx(
            gnmt_score(toy.checkpoint, sources[i], expected[i], alpha), abs=0.02
        )


@pytest.mark.slow
@pytest.mark.parametrize("norm", NORMS)
def test_int8_is_smaller_and_close(norm, toys, ct2_dirs):
    from transformer_nmt.export.ctranslate2 import check_ctranslate2_scores, vocabulary_tokens

    float32, int8 = ct2_dirs[(norm, "float32")], ct2_dirs[(norm, "int8")]
    assert (int8 / "model.bin").stat().st_size < 0.5 * (float32 / "model.bin").stat().st_size
    toy = toys[norm]
    sources = sources_of(toy)
    theirs = ct2(int8, beam_size=1).translate_ids(sources)
    expected = ours(toy.checkpoint, sources, beam_size=1)
    assert sum(a == b for a, b in zip(theirs, expected, strict=True)) >= 0.8 * len(sources)
    tokens = vocabulary_tokens(toy.checkpoint.tokenizer, len(toy.checkpoint.tokenizer))
    _, mean = check_ctranslate2_scores(toy.checkpoint, int8, tokens, "int8")
    assert 1e-4 < mean < 0.1  # quantized (not float32 in disguise), yet close


@pytest.mark.slow
@pytest.mark.parametrize("norm", NORMS)
def test_text_translations_equal_our_translators(norm, toys, ct2_dirs):
    from transformer_nmt.evaluation import Translator

    toy = toys[norm]
    lines = [*toy.val_texts[:30], "", "   "]
    expected = Translator.from_checkpoint(toy.checkpoint, beam_size=1).translate(lines)
    translator = ct2(ct2_dirs[(norm, "float32")], beam_size=1)
    assert translator.translate(lines) == expected
    assert expected[-2:] == ["", ""] and (translator.src_lang, translator.tgt_lang) == ("en", "de")


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides",
    [
        dict(positional="learned"),
        dict(d_k=16, d_v=16),
        dict(share_all_embeddings=False, tie_embeddings=False, activation="swish"),
        dict(output_bias=True, activation="swish"),
        dict(norm_layer="rmsnorm"),
    ],
)
def test_shapes_hf_cannot_hold_decode_as_ours(overrides, tmp_path):
    toy = train_toy_checkpoint(tmp_path / "toy", "pre", steps=60, **overrides)
    before = {k: v.clone() for k, v in toy.checkpoint.model.state_dict().items()}
    directory = export_ctranslate2(toy.checkpoint, tmp_path / "out", "int8")
    for key, value in toy.checkpoint.model.state_dict().items():
        assert torch.equal(value, before[key]), key  # the quantizer worked on copies
    directory = export_ctranslate2(toy.checkpoint, tmp_path / "out", overwrite=True)
    sources = sources_of(toy)
    expected = ours(toy.checkpoint, sources, beam_size=1)
    assert ct2(directory, beam_size=1).translate_ids(sources) == expected


@pytest.mark.slow
def test_an_imported_marian_model_decodes_as_ours(tmp_path, marian_dir):
    """opus-mt's ids (EOS 0, pad = decoder start = the last id), swish and a logits bias."""
    from transformer_nmt.export import import_marian

    imported = import_marian(marian_dir)
    directory = export_ctranslate2(imported, tmp_path / "ct2")
    config = json.loads((directory / "config.json").read_text())
    assert (config["decoder_start_token"], config["eos_token"]) == ("<pad>", "</s>")
    translator = ct2(directory, beam_size=1, max_len_a=0.0, max_len_b=10)
    sources = translator.encode(["A man plays.", "The dog runs in the park.", "Two people sit."])
    expected = ours(imported, sources, beam_size=1, max_len_a=0.0, max_len_b=10)
    assert translator.translate_ids(sources) == expected
    assert any(expected)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (dict(src_vocab_size=23), "src_vocab_size=23 != tgt_vocab_size=19"),
        (dict(src_vocab_size=19, d_k=4), "d_k=4 != d_v=8"),
    ],
)
def test_a_shape_ctranslate2_cannot_hold_is_one_error(overrides, field):
    tokens = [f"t{i}" for i in range(19)]
    with pytest.raises(UnsupportedModelError, match="^cannot convert to CTranslate2: " + field):
        check_ctranslate2_compatible(tiny_config(**overrides), tokens)
    with pytest.raises(UnsupportedModelError, match=r"strings \['t1'\] stand for several ids"):
        check_ctranslate2_compatible(tiny_config(src_vocab_size=19), ["t1", *tokens[1:-1], "t1"])


def test_not_an_export_is_one_clear_error(tmp_path):
    from transformer_nmt.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match="is not a CTranslate2 export of this project"):
        ct2(tmp_path)
