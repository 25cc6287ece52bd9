"""What the demo page shows: the n-best list (its best is translate.py's translation) and every
head's attention of a hypothesis, drawn as a heatmap with the tokens on its axes."""

import numpy as np
import pytest
from omegaconf import OmegaConf

from tests.helpers.run_if import run_if
from transformer_nmt.checkpoint import load_checkpoint
from transformer_nmt.cli.demo import load_demo_model
from transformer_nmt.decoding import SearchOptions, gnmt_length_penalty
from transformer_nmt.demo.attention import KINDS, MEAN_OVER_HEADS, heatmap
from transformer_nmt.demo.models import CheckpointModel
from transformer_nmt.evaluation import Translator

TEXT = "A dog runs in the park."


def escaped(token: str) -> str:
    """As the heatmap's labels and hover show a token: ``<`` and ``>`` as entities."""
    return token.replace("<", "&lt;").replace(">", "&gt;")


@pytest.fixture(scope="module")
def checkpoint(workspace):
    return load_checkpoint(workspace.ckpt_path)


@pytest.mark.parametrize(("beam", "alpha"), [(1, 0.6), (3, 0.6), (4, 0.0)])
def test_the_n_best_list_is_ranked_and_its_best_is_translate_py_s(checkpoint, beam, alpha):
    options = SearchOptions(max_len_b=8)
    model = CheckpointModel(checkpoint, options)
    translation = model.translate(TEXT, beam, alpha)
    expected = Translator.from_checkpoint(
        checkpoint, options, beam_size=beam, length_penalty=alpha
    ).translate([TEXT])[0]
    assert translation.candidates[0].text == expected
    assert 1 <= len(translation.candidates) <= beam
    scores = [candidate.score for candidate in translation.candidates]
    assert scores == sorted(scores, reverse=True)
    for candidate in translation.candidates:
        length = len(candidate.ids) + candidate.ended_with_eos
        assert candidate.score == pytest.approx(
            candidate.log_prob / gnmt_length_penalty(length, alpha), rel=1e-5
        )


def test_attention_has_every_layer_and_head_with_rows_that_sum_to_one(checkpoint):
    model = CheckpointModel(checkpoint, SearchOptions(max_len_b=8))
    translation = model.translate(TEXT, 2, 0.6)
    maps = model.attention(translation, rank=1 if len(translation.candidates) > 1 else 0)
    config = checkpoint.model.config
    candidate = translation.candidates[1 if len(translation.candidates) > 1 else 0]
    n_predicted = len(candidate.ids) + candidate.ended_with_eos
    assert len(maps.source_tokens) == len(translation.source_ids)
    assert len(maps.predicted_tokens) == n_predicted == len(maps.decoder_input_tokens)
    shapes = {
        "cross": (config.n_decoder_layers, config.n_heads, n_predicted, len(maps.source_tokens)),
        "encoder_self": (config.n_encoder_layers, config.n_heads, *[len(maps.source_tokens)] * 2),
        "decoder_self": (config.n_decoder_layers, config.n_heads, n_predicted, n_predicted),
    }
    assert {kind: weights.shape for kind, weights in maps.weights.items()} == shapes
    for weights in maps.weights.values():
        np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-5)
    assert np.triu(maps.weights["decoder_self"][0, 0], k=1).max() == 0  # causal


def test_the_heatmap_draws_the_chosen_head_or_the_mean_with_tokens_on_its_axes(checkpoint):
    model = CheckpointModel(checkpoint, SearchOptions(max_len_b=8))
    maps = model.attention(model.translate(TEXT, 2, 0.6), rank=0)
    for kind in KINDS:
        rows, columns = maps.axes(kind)
        figure = heatmap(maps, kind, 0, "1")
        z = np.asarray(figure.data[0].z)
        np.testing.assert_allclose(z, maps.weights[kind][0, 1])
        assert figure.layout.yaxis.ticktext == tuple(map(escaped, rows))
        assert figure.layout.xaxis.ticktext == tuple(map(escaped, columns))
        assert z.shape == (len(rows), len(columns))
        assert tuple(figure.data[0].customdata[-1][0]) == (escaped(rows[-1]), escaped(columns[0]))
        mean = np.asarray(heatmap(maps, kind, 0, MEAN_OVER_HEADS).data[0].z)
        np.testing.assert_allclose(mean, maps.weights[kind][0].mean(axis=0), atol=1e-6)
    assert "&lt;/s&gt;" in heatmap(maps, "cross", 0, "0").layout.xaxis.ticktext[-1]


def test_a_hugging_face_export_is_tried_with_our_search_and_its_attention(marian_dir):
    cfg = OmegaConf.create(
        {"ckpt_path": None, "hf_dir": str(marian_dir), "model_dir": None, "device": "cpu",
         "search": OmegaConf.structured(SearchOptions(max_len_b=6))}
    )  # fmt: skip
    model = load_demo_model(cfg)
    assert model.has_attention
    translation = model.translate("a b c", 2, 0.6)
    expected = Translator.from_checkpoint(model.checkpoint, model.options, beam_size=2)
    assert translation.candidates[0].text == expected.translate(["a b c"])[0]
    maps = model.attention(translation, 0)
    assert maps.weights["cross"].shape[-1] == len(translation.source_ids)


@pytest.mark.slow
@run_if(package="ctranslate2")
def test_a_ctranslate2_export_gives_translate_py_s_best_first_and_no_attention(toys, ct2_dirs):
    from transformer_nmt.demo.models import CTranslate2Model
    from transformer_nmt.evaluation import CTranslate2Translator

    options = SearchOptions(beam_size=3, length_penalty=1.0, max_len_b=12)
    translator = CTranslate2Translator(ct2_dirs["post", "float32"], options)
    model = CTranslate2Model(CTranslate2Translator(ct2_dirs["post", "float32"], options))
    texts = toys["post"].val_texts[:8]
    for text, expected in zip(texts, translator.translate(texts), strict=True):
        translation = model.translate(text, 3, 1.0)
        assert translation.candidates[0].text == expected
        scores = [candidate.score for candidate in translation.candidates]
        assert scores == sorted(scores, reverse=True) and len(scores) <= 3
    assert model.attention(translation, 0) is None and not model.has_attention
