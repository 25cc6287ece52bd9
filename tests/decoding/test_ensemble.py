"""Ensembles: the mean of the models' log-probabilities at each step, in greedy and beam search."""

import copy

import pytest
import torch

from tests.helpers.reverse_task import BOS, EOS, PAD, reverse_task_config
from transformer_nmt.decoding import (
    Ensemble,
    beam_search,
    greedy_hypotheses,
    score_references,
    translate_token_ids,
)
from transformer_nmt.model import Transformer

MAX_LEN_B = 5


def outputs(hypotheses):
    """(tokens, score, token log-probs) of each hypothesis, for exact comparisons."""
    return [(h.tokens, h.score, h.token_log_probs) for h in hypotheses]


@pytest.mark.parametrize("twin", ["same object", "copy"])
def test_an_ensemble_of_a_model_with_itself_is_the_model(reverse_model, sources, twin):
    other = reverse_model if twin == "same object" else copy.deepcopy(reverse_model)
    ensemble = [reverse_model, other]
    greedy = dict(max_len_b=MAX_LEN_B)
    assert outputs(greedy_hypotheses(ensemble, sources, BOS, EOS, **greedy)) == outputs(
        greedy_hypotheses(reverse_model, sources, BOS, EOS, **greedy)
    )  # exactly: the mean of two equal numbers is that number
    beam = dict(beam_size=4, nbest=4, max_len_b=MAX_LEN_B)
    together = beam_search(ensemble, sources, BOS, EOS, **beam)
    alone = beam_search(reverse_model, sources, BOS, EOS, **beam)
    assert [outputs(s) for s in together] == [outputs(s) for s in alone]


def test_an_ensemble_searches_the_mean_of_its_models_log_probs(
    reverse_model, other_reverse_model, sources
):
    ensemble = [reverse_model, other_reverse_model]
    options = dict(beam_size=3, nbest=3, max_len_b=MAX_LEN_B)
    found = beam_search(ensemble, sources, BOS, EOS, **options)
    # each hypothesis' log-probabilities are the mean of the two models' for its tokens
    for row, hypotheses in enumerate(found[:-1]):  # the last source is all padding
        for h in hypotheses:
            labels = torch.tensor([h.tokens + [EOS]])[:, : len(h.token_log_probs)]
            each = [score_references(m, sources[row : row + 1], labels, BOS) for m in ensemble]
            torch.testing.assert_close(
                torch.tensor([h.token_log_probs]), (each[0] + each[1]) / 2, atol=1e-5, rtol=0
            )
    rerun = beam_search(ensemble, sources, BOS, EOS, use_cache=False, **options)
    assert [[h.tokens for h in s] for s in found] == [[h.tokens for h in s] for s in rerun]
    # the ensemble is neither of its models
    alone = [beam_search(m, sources, BOS, EOS, **options) for m in ensemble]
    for single in alone:
        assert [[h.tokens for h in s] for s in single] != [[h.tokens for h in s] for s in found]


def test_greedy_ensembles_batch_like_single_models(reverse_model, other_reverse_model, sources):
    ensemble = [reverse_model, other_reverse_model]
    ids = [[t for t in row if t != PAD] for row in sources.tolist()]
    batched = translate_token_ids(ensemble, ids, BOS, EOS, beam_size=1, batch_size=4)
    one_by_one = [translate_token_ids(ensemble, [row], BOS, EOS, beam_size=1)[0] for row in ids]
    assert batched == one_by_one
    assert batched != translate_token_ids(reverse_model, ids, BOS, EOS, beam_size=1)


def test_models_of_other_vocabularies_do_not_ensemble(reverse_model):
    other = Transformer(reverse_task_config(src_vocab_size=14, tgt_vocab_size=14))
    with pytest.raises(
        ValueError, match=r"model 1 of the ensemble differs .* \['tgt_vocab_size'\]"
    ):
        Ensemble.of([reverse_model, other])
    with pytest.raises(ValueError, match="at least one model"):
        Ensemble.of([])


def test_models_of_other_shapes_ensemble(reverse_model, sources):
    torch.manual_seed(1)
    smaller = Transformer(reverse_task_config(n_encoder_layers=1, n_decoder_layers=1, max_len=32))
    ensemble = [reverse_model, smaller.eval()]
    found = greedy_hypotheses(ensemble, sources, BOS, EOS, max_len_b=40)
    rerun = greedy_hypotheses(ensemble, sources, BOS, EOS, max_len_b=40, use_cache=False)
    assert [h.tokens for h in found] == [h.tokens for h in rerun]
    assert max(len(h.token_log_probs) for h in found) == 31  # the shorter max_len caps outputs
    for row, h in enumerate(found[:-1]):
        labels = torch.tensor([h.tokens + [EOS]])[:, : len(h.token_log_probs)]
        each = [score_references(m, sources[row : row + 1], labels, BOS) for m in ensemble]
        torch.testing.assert_close(
            torch.tensor([h.token_log_probs]), (each[0] + each[1]) / 2, atol=1e-5, rtol=0
        )
