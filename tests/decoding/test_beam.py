"""Beam search on a half-trained reverse model: cache, batching, scores, limits and errors."""

import pytest
import torch

from tests.helpers.decoding import count_cross_attention_projections, unpadded
from tests.helpers.reverse_task import BOS, EOS, PAD
from transformer_nmt.decoding import beam_search, greedy_hypotheses, greedy_search

MAX_LEN_B = 5


def test_cached_beam_matches_rerunning_the_whole_prefix(reverse_model, sources):
    options = dict(beam_size=4, nbest=4, max_len_b=MAX_LEN_B)
    cached = beam_search(reverse_model, sources, BOS, EOS, **options)
    rerun = beam_search(reverse_model, sources, BOS, EOS, use_cache=False, **options)
    for fast, slow in zip(cached, rerun, strict=True):
        assert [h.tokens for h in fast] == [h.tokens for h in slow]
        torch.testing.assert_close(
            [h.score for h in fast], [h.score for h in slow], atol=1e-5, rtol=0
        )
        torch.testing.assert_close(
            [h.log_prob for h in fast], [h.log_prob for h in slow], atol=1e-5, rtol=0
        )


def test_beam_size_one_equals_greedy(reverse_model, sources):
    greedy = greedy_hypotheses(
        reverse_model, sources, BOS, EOS, max_len_b=MAX_LEN_B, length_penalty=0.6
    )
    beam = beam_search(reverse_model, sources, BOS, EOS, beam_size=1, max_len_b=MAX_LEN_B)
    assert [h[0].tokens for h in beam] == [h.tokens for h in greedy]
    torch.testing.assert_close(
        [h[0].score for h in beam], [h.score for h in greedy], atol=1e-5, rtol=0
    )


def test_wider_beams_find_other_translations_than_greedy(reverse_model, sources):
    # Guards the other tests against a model on which every search agrees.
    greedy = greedy_search(reverse_model, sources, BOS, EOS, max_len_b=MAX_LEN_B)
    beam = beam_search(reverse_model, sources, BOS, EOS, beam_size=4, max_len_b=MAX_LEN_B)
    assert [h[0].tokens for h in beam] != greedy


def test_beam_batched_equals_one_by_one(reverse_model, sources):
    options = dict(beam_size=3, nbest=3, max_len_b=MAX_LEN_B)
    batched = beam_search(reverse_model, sources, BOS, EOS, **options)
    for row, hypotheses in enumerate(batched):
        (alone,) = beam_search(reverse_model, unpadded(sources, row), BOS, EOS, **options)
        assert [h.tokens for h in alone] == [h.tokens for h in hypotheses]
        torch.testing.assert_close(
            [h.score for h in alone], [h.score for h in hypotheses], atol=1e-5, rtol=0
        )


def test_hypotheses_are_sorted_best_first_and_scored_with_the_gnmt_penalty(reverse_model, sources):
    alpha = 0.6
    results = beam_search(
        reverse_model, sources, BOS, EOS, beam_size=4, nbest=4, length_penalty=alpha
    )
    real_sentences = results[:-1]  # the last row is all padding
    for hypotheses in real_sentences:
        assert len(hypotheses) == 4
        scores = [h.score for h in hypotheses]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in hypotheses}) == 4
        for h in hypotheses:
            length = len(h.token_log_probs)  # |Y| counts the EOS
            assert length in (len(h.tokens), len(h.tokens) + 1)
            assert h.log_prob == pytest.approx(sum(h.token_log_probs), abs=1e-5)
            assert h.score == pytest.approx(h.log_prob / ((5 + length) / 6) ** alpha, abs=1e-5)
    # The length penalty changes the ranking somewhere, or alpha would not be tested.
    plain = beam_search(reverse_model, sources, BOS, EOS, beam_size=4, nbest=4, length_penalty=0.0)
    assert [[h.tokens for h in s] for s in plain] != [[h.tokens for h in s] for s in results]


def test_beam_outputs_respect_the_length_limit(reverse_model, sources):
    results = beam_search(
        reverse_model, sources, BOS, EOS, beam_size=4, nbest=4, max_len_a=0, max_len_b=3
    )
    for hypotheses in results:
        for h in hypotheses:
            assert len(h.tokens) <= 3
            assert not {BOS, EOS, PAD} & set(h.tokens)


def test_all_pad_or_empty_sources_give_one_empty_hypothesis(reverse_model, sources):
    results = beam_search(reverse_model, sources, BOS, EOS, beam_size=4, nbest=2)
    assert [(h.tokens, h.score) for h in results[-1]] == [([], 0.0)]
    empty = beam_search(reverse_model, torch.zeros(2, 0, dtype=torch.long), BOS, EOS)
    assert [[h.tokens for h in s] for s in empty] == [[[]], [[]]]


def test_beam_keeps_cross_attention_projected_once(reverse_model, sources, monkeypatch):
    calls = count_cross_attention_projections(reverse_model, monkeypatch)
    beam_search(reverse_model, sources, BOS, EOS, beam_size=4)
    # Once per layer, for the 9 real sentences only (not per beam, not per step).
    assert calls == [9] * reverse_model.config.n_decoder_layers


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(beam_size=0), "beam_size must be a positive integer"),
        (dict(beam_size=2, nbest=3), "nbest=3 is more than beam_size=2"),
        (dict(nbest=0), "nbest must be a positive integer"),
        (dict(length_penalty=-0.5), "length_penalty must be >= 0"),
        (dict(beam_size=6), "beam_size must be at most 5"),
    ],
)
def test_bad_search_arguments_raise_clear_errors(reverse_model, sources, options, message):
    with pytest.raises(ValueError, match=message):
        beam_search(reverse_model, sources, BOS, EOS, **options)
