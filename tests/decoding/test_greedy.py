"""Greedy search on a half-trained reverse model: cache, batching, scores and length limits."""

import pytest
import torch

from tests.helpers.decoding import count_cross_attention_projections, unpadded
from tests.helpers.reverse_task import BOS, EOS, PAD
from transformer_nmt.decoding import (
    greedy_hypotheses,
    greedy_search,
    max_output_lengths,
    rerun_greedy_search,
)

MAX_LEN_B = 5  # short enough that some sentences hit the limit before EOS


def test_cached_greedy_matches_rerunning_the_whole_prefix(reverse_model, sources):
    cached = greedy_hypotheses(reverse_model, sources, BOS, EOS, max_len_b=MAX_LEN_B)
    rerun = greedy_hypotheses(
        reverse_model, sources, BOS, EOS, max_len_b=MAX_LEN_B, use_cache=False
    )
    assert [h.tokens for h in cached] == [h.tokens for h in rerun]
    for fast, slow in zip(cached, rerun, strict=True):
        torch.testing.assert_close(fast.token_log_probs, slow.token_log_probs, atol=1e-5, rtol=0)
        assert fast.score == pytest.approx(slow.score, abs=1e-5)
    greedy = greedy_search(reverse_model, sources, BOS, EOS, max_len_b=MAX_LEN_B)
    assert greedy == rerun_greedy_search(reverse_model, sources, BOS, EOS, max_len_b=MAX_LEN_B)
    # The comparison covered sentences that ended by EOS and ones cut at the length limit.
    limits = max_output_lengths(sources, PAD, 1.0, MAX_LEN_B, reverse_model.config.max_len).tolist()
    lengths = [len(h.token_log_probs) for h in cached]
    ended_by_eos = [n < limit for n, limit in zip(lengths, limits, strict=True) if limit]
    assert any(ended_by_eos) and not all(ended_by_eos)


def test_greedy_batched_equals_one_by_one(reverse_model, sources):
    batched = greedy_hypotheses(reverse_model, sources, BOS, EOS, max_len_b=MAX_LEN_B)
    for row, hypothesis in enumerate(batched):
        alone = greedy_hypotheses(
            reverse_model, unpadded(sources, row), BOS, EOS, max_len_b=MAX_LEN_B
        )
        assert alone[0].tokens == hypothesis.tokens
        assert alone[0].score == pytest.approx(hypothesis.score, abs=1e-5)


def test_greedy_scores_are_length_normalised_log_probs(reverse_model, sources):
    for hypothesis in greedy_hypotheses(reverse_model, sources, BOS, EOS, length_penalty=0.6):
        if not hypothesis.tokens:
            continue
        length = len(hypothesis.token_log_probs)  # counts the EOS when there is one
        assert hypothesis.log_prob == pytest.approx(sum(hypothesis.token_log_probs))
        assert hypothesis.score == pytest.approx(hypothesis.log_prob / ((5 + length) / 6) ** 0.6)
        assert all(p <= 0 for p in hypothesis.token_log_probs)


def test_outputs_hold_no_special_tokens_and_respect_the_length_limit(reverse_model, sources):
    outputs = greedy_search(reverse_model, sources, BOS, EOS, max_len_a=0.5, max_len_b=2)
    lengths = (sources != PAD).sum(dim=1).tolist()
    for tokens, length in zip(outputs, lengths, strict=True):
        assert len(tokens) <= int(0.5 * length + 2)
        assert not {BOS, EOS, PAD} & set(tokens)


def test_max_output_lengths_follow_a_times_source_words_plus_b_capped_by_the_model():
    # 3 words + EOS, 1 word + EOS, EOS alone (an empty sentence), and an all-pad row
    src = torch.tensor([[5, 6, 7, EOS], [5, EOS, PAD, PAD], [EOS, PAD, PAD, PAD], [PAD] * 4])
    assert max_output_lengths(src, PAD, 1.5, 1, model_max_len=256).tolist() == [5, 2, 1, 0]
    assert max_output_lengths(src, PAD, 1.0, 50, model_max_len=10).tolist() == [9, 9, 9, 0]


def test_the_papers_length_cap_is_the_input_length_plus_50():
    """§6.1: "maximum output length during inference to input length + 50"; the input length
    counts the source's words, not the EOS the data module appends to it."""
    words = [5, 6, 7, 8, 9, 10, 11]
    src = torch.tensor([[*words, EOS], [*words[:2], EOS, *[PAD] * 5]])
    assert max_output_lengths(src, PAD, 1.0, 50, model_max_len=256).tolist() == [57, 52]


def test_all_pad_or_empty_sources_give_empty_translations(reverse_model):
    all_pad = torch.full((2, 5), PAD)
    assert greedy_search(reverse_model, all_pad, BOS, EOS) == [[], []]
    assert greedy_search(reverse_model, torch.zeros(3, 0, dtype=torch.long), BOS, EOS) == [
        [],
        [],
        [],
    ]
    assert greedy_search(reverse_model, torch.zeros(0, 4, dtype=torch.long), BOS, EOS) == []


def test_greedy_runs_in_eval_mode_and_restores_training_mode(reverse_model, sources):
    expected = greedy_search(reverse_model, sources, BOS, EOS)
    reverse_model.train()
    try:
        assert (
            greedy_search(reverse_model, sources, BOS, EOS) == expected
        )  # no dropout while decoding
        assert reverse_model.training
    finally:
        reverse_model.eval()


def test_cross_attention_keys_and_values_are_projected_once_per_batch(
    reverse_model, sources, monkeypatch
):
    calls = count_cross_attention_projections(reverse_model, monkeypatch)
    greedy_search(reverse_model, sources, BOS, EOS)
    assert len(calls) == reverse_model.config.n_decoder_layers
