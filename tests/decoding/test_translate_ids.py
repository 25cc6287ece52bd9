"""translate_token_ids: batches of token-id lists, in input order, within the model's length."""

import pytest
import torch

from tests.helpers.reverse_task import BOS, EOS, PAD
from transformer_nmt.decoding import (
    beam_search,
    greedy_search,
    nbest_token_ids,
    translate_token_ids,
)


def as_lists(src: torch.Tensor) -> list[list[int]]:
    return [[t for t in row if t != PAD] for row in src.tolist()]


@pytest.mark.parametrize("beam_size", [1, 3])
def test_translate_token_ids_keeps_the_input_order(reverse_model, sources, beam_size):
    ids = as_lists(sources)
    got = translate_token_ids(reverse_model, ids, BOS, EOS, beam_size=beam_size, batch_size=4)
    if beam_size == 1:
        expected = greedy_search(reverse_model, sources, BOS, EOS)
    else:
        expected = [h[0].tokens for h in beam_search(reverse_model, sources, BOS, EOS, beam_size=3)]
    assert got == expected
    assert got[-1] == []  # the empty source


def test_translate_token_ids_rejects_sources_longer_than_the_model(reverse_model):
    too_long = [[3] * (reverse_model.config.max_len + 1)]
    with pytest.raises(ValueError, match="longer than the model's max_len=64"):
        translate_token_ids(reverse_model, too_long, BOS, EOS)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_a_1_best_list_is_the_search_output(reverse_model, sources, beam_size):
    ids = as_lists(sources)
    options = dict(beam_size=beam_size, batch_size=4)
    one_best = nbest_token_ids(reverse_model, ids, BOS, EOS, nbest=1, **options)
    best = translate_token_ids(reverse_model, ids, BOS, EOS, **options)
    assert [[h.tokens for h in sentence] for sentence in one_best] == [[b] for b in best]
    assert one_best == nbest_token_ids(reverse_model, ids, BOS, EOS, **options)  # nbest=None


def test_an_n_best_list_holds_the_k_best_hypotheses_best_first(reverse_model, sources):
    ids = as_lists(sources)
    nbest = nbest_token_ids(reverse_model, ids, BOS, EOS, beam_size=4, nbest=3, batch_size=4)
    beam = beam_search(reverse_model, sources, BOS, EOS, beam_size=4, nbest=4)
    for hypotheses, wider, source in zip(nbest, beam, ids, strict=True):
        if not source:
            assert [(h.tokens, h.score) for h in hypotheses] == [([], 0.0)]
            continue
        assert len(hypotheses) == 3
        scores = [h.score for h in hypotheses]
        assert scores == sorted(scores, reverse=True)
        assert [h.tokens for h in hypotheses] == [h.tokens for h in wider[:3]]
    assert any(len({h.score for h in s}) > 1 for s in nbest)  # distinct scores were ordered
