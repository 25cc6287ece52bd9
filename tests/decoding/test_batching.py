import pytest
import torch

from transformer_nmt.decoding import beam_search, greedy_search, translate_token_ids

from ..reverse_task import BOS, EOS, PAD


def as_lists(src: torch.Tensor) -> list[list[int]]:
    return [[t for t in row if t != PAD] for row in src.tolist()]


@pytest.mark.parametrize("beam_size", [1, 3])
def test_translate_token_ids_keeps_the_input_order(model, sources, beam_size):
    ids = as_lists(sources)
    got = translate_token_ids(model, ids, BOS, EOS, beam_size=beam_size, batch_size=4)
    if beam_size == 1:
        expected = greedy_search(model, sources, BOS, EOS)
    else:
        expected = [h[0].tokens for h in beam_search(model, sources, BOS, EOS, beam_size=3)]
    assert got == expected
    assert got[-1] == []  # the empty source


def test_translate_token_ids_rejects_sources_longer_than_the_model(model):
    too_long = [[3] * (model.config.max_len + 1)]
    with pytest.raises(ValueError, match="longer than the model's max_len=64"):
        translate_token_ids(model, too_long, BOS, EOS)
