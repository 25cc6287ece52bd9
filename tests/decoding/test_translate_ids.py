"""translate_token_ids: batches of token-id lists, in input order, within the model's length."""

import pytest
import torch

from tests.helpers.reverse_task import BOS, EOS, PAD
from transformer_nmt.decoding import beam_search, greedy_search, translate_token_ids


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
