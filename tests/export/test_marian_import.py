"""Importing a Marian (or Pegasus) checkpoint: our model computes its logits (swish FFN and
logits bias included), import → export gives back the same function, and what our model cannot
hold fails once."""

import pytest
import torch

from tests.helpers.marian_folder import SMALL_MARIAN
from tests.helpers.toy_checkpoint import pad_rows, train_toy_checkpoint
from transformer_nmt.export import UnsupportedModelError, export_huggingface, import_marian
from transformer_nmt.export.huggingface import hf_logits
from transformer_nmt.export.marian_import import config_from_hf
from transformer_nmt.export.verification import our_logits, probe_batch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def hf_model_of(folder):
    from transformers import AutoModelForSeq2SeqLM

    return AutoModelForSeq2SeqLM.from_pretrained(folder).eval()


def test_the_imported_model_computes_the_folders_logits(marian_dir):
    imported = import_marian(marian_dir)
    config = imported.model.config
    assert (config.activation, config.output_bias, config.norm) == (
        "swish",
        True,
        {"marian": "post", "pegasus": "pre"}[marian_dir.parent.name.rstrip("0123456789")],
    )
    assert (imported.bos_id, imported.eos_id, imported.pad_id) == (59, 0, 59)  # opus-mt's ids
    assert (imported.src_lang, imported.tgt_lang) == ("en", "de")
    src, tgt_in = probe_batch(config, imported.bos_id, imported.eos_id, imported.pad_id, seed=5)
    theirs = hf_logits(hf_model_of(marian_dir), src, tgt_in, imported.pad_id)
    real = tgt_in != imported.pad_id
    real[:, 0] = True
    assert float(theirs[real].abs().max()) > 1.0  # far from uniform: the comparison means much
    torch.testing.assert_close(our_logits(imported.model, src, tgt_in)[real], theirs[real])


@pytest.mark.slow
def test_import_then_export_gives_the_same_model(marian_dir, tmp_path):
    from transformers import AutoTokenizer

    imported = import_marian(marian_dir)
    exported = export_huggingface(imported, tmp_path / "again")
    original, again = hf_model_of(marian_dir), hf_model_of(exported)
    assert type(again) is type(original)
    src, tgt_in = probe_batch(imported.model.config, 59, 0, 59, seed=7)
    torch.testing.assert_close(
        hf_logits(again, src, tgt_in, 59), hf_logits(original, src, tgt_in, 59), atol=1e-5, rtol=0
    )
    text = ["A man plays with the ball.", "Two dogs."]
    assert (
        AutoTokenizer.from_pretrained(exported)(text)["input_ids"]
        == AutoTokenizer.from_pretrained(marian_dir)(text)["input_ids"]
    )


@pytest.mark.slow
def test_our_translator_equals_hf_generate_on_the_imported_model(marian_dir):
    """Decoder start = pad, pad never generated, and no EOS forced at the limit (which opus-mt's
    forced_eos_token_id would do)."""
    from transformer_nmt.evaluation import Translator

    imported = import_marian(marian_dir)
    translator = Translator.from_checkpoint(imported, beam_size=1, max_len_a=0.0, max_len_b=8)
    sources = translator.encode(["A man plays.", "The red dog runs in the park.", "A child."])
    batch = pad_rows(sources, 59)
    with torch.inference_mode():
        generated = hf_model_of(marian_dir).generate(
            input_ids=batch,
            attention_mask=batch != 59,
            num_beams=1,
            max_new_tokens=8,
            suppress_tokens=[59],
            forced_eos_token_id=None,
        )
    expected = [[t for t in row[1:] if t != 59] for row in generated.tolist()]
    expected = [row[: row.index(0)] if 0 in row else row for row in expected]
    assert translator.translate_ids(sources) == expected


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_our_export_imports_back_to_our_exact_weights(norm, tmp_path):
    toy = train_toy_checkpoint(tmp_path / "toy", norm, steps=10, output_bias=True)
    imported = import_marian(export_huggingface(toy.checkpoint, tmp_path / "hf"))
    ours, theirs = toy.checkpoint.model.config.to_dict(), imported.model.config.to_dict()
    assert {**theirs, "n_layers": ours["n_layers"]} == ours  # n_layers: HF has one per stack
    assert (imported.src_lang, imported.tgt_lang) == ("en", "de")
    for key, value in toy.checkpoint.model.state_dict().items():
        assert torch.equal(imported.model.state_dict()[key], value), key


@pytest.mark.parametrize(
    ("overrides", "fields"),
    [
        (dict(activation_function="gelu"), ["activation_function='gelu'"]),
        (dict(scale_embedding=False), ["scale_embedding=False"]),
        (
            dict(decoder_attention_heads=2, decoder_ffn_dim=32),
            [
                "encoder_attention_heads=4 != decoder_attention_heads=2",
                "encoder_ffn_dim=64 != decoder_ffn_dim=32",
            ],
        ),
    ],
)
def test_what_our_model_cannot_hold_is_one_error(overrides, fields):
    from transformers import MarianConfig

    config = MarianConfig(**{**SMALL_MARIAN, "vocab_size": 60, **overrides})
    with pytest.raises(UnsupportedModelError) as error:
        config_from_hf(config, output_bias=True)
    assert [problem.split(" (")[0] for problem in error.value.problems] == fields
    assert "\n" not in str(error.value)
