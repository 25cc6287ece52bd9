"""Our Transformer computes the same function as HF Marian given the same weights.

This checks the benchmarks' premise (``benchmarks/workload.py`` builds Marian to our shape
and copies our weights into it), and is an independent check of the model itself: a
reference implementation agrees with ours on logits, greedy search and beam search.
"""

import pytest
import torch

from benchmarks.workload import (
    TorchTransformerNMT,
    build_marian,
    copy_into_marian,
)
from tests.helpers.reverse_task import (
    BOS,
    EOS,
    PAD,
    VOCAB,
    reverse_task_batch,
    reverse_task_config,
    reverse_task_sources,
)
from transformer_nmt.decoding import beam_search, greedy_search
from transformer_nmt.model import Transformer


def marian_with_weights_of(ours: Transformer):
    """HF Marian built to our model's shape, holding its weights, in eval mode."""
    marian = build_marian(ours.config, bos_id=BOS, eos_id=EOS).eval()
    copy_into_marian(ours, marian)
    return marian


def untrained(attention: str = "sdpa") -> Transformer:
    torch.manual_seed(0)
    return Transformer(reverse_task_config(attention=attention)).eval()


def marian_generate(marian, src: torch.Tensor, beams: int, steps: int) -> list[list[int]]:
    from transformers import GenerationConfig

    # beam search: rank by summed log-probability (α = 0), stop at `beams` finished hypotheses
    beam_options = dict(early_stopping=True, length_penalty=0.0) if beams > 1 else {}
    config = GenerationConfig(
        do_sample=False,
        num_beams=beams,
        max_new_tokens=steps,
        suppress_tokens=[PAD, BOS],
        decoder_start_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
        forced_eos_token_id=None,
        **beam_options,
    )
    with torch.inference_mode():
        out = marian.generate(input_ids=src, attention_mask=src != PAD, generation_config=config)
    rows = []
    for row in out.tolist():
        tokens = row[1:]
        if EOS in tokens:
            tokens = tokens[: tokens.index(EOS)]
        rows.append([t for t in tokens if t != PAD])
    return rows


@pytest.mark.parametrize("attention", ["manual", "sdpa"])
def test_teacher_forced_logits_match_marian(attention):
    ours = untrained(attention)
    marian = marian_with_weights_of(ours)
    src, tgt, _ = reverse_task_batch(6, torch.Generator().manual_seed(1))
    decoder_mask = tgt != PAD
    with torch.no_grad():
        expected = marian(
            input_ids=src,
            attention_mask=src != PAD,
            decoder_input_ids=tgt,
            decoder_attention_mask=decoder_mask,
        ).logits
        torch.testing.assert_close(ours(src, tgt), expected, atol=1e-5, rtol=0)


@pytest.fixture(scope="module")
def reverse_marian(reverse_model):
    """Marian with the weights of the half-trained reverse model: trained a little, its outputs
    end by EOS at varying steps and its beams disagree with greedy search (an untrained model
    mostly repeats one token)."""
    return marian_with_weights_of(reverse_model)


@pytest.mark.parametrize("seed", range(3))
def test_greedy_and_beam_search_match_marian_generate(reverse_model, reverse_marian, seed):
    src = reverse_task_sources(16, seed=100 + seed)
    steps = 10
    assert greedy_search(reverse_model, src, BOS, EOS, max_len_a=0.0, max_len_b=steps) == (
        marian_generate(reverse_marian, src, beams=1, steps=steps)
    )
    hypotheses = beam_search(
        reverse_model,
        src,
        BOS,
        EOS,
        beam_size=4,
        length_penalty=0.0,
        max_len_a=0.0,
        max_len_b=steps,
    )
    expected = marian_generate(reverse_marian, src, beams=4, steps=steps)
    assert [h[0].tokens for h in hypotheses] == expected


def test_competitors_have_our_shape():
    ours = untrained()
    marian = build_marian(ours.config)
    trainable = sum(p.numel() for p in marian.parameters() if p.requires_grad)
    assert trainable == ours.num_parameters()
    wrapped = TorchTransformerNMT(ours.config)
    # nn.Transformer adds one LayerNorm (weight + bias) after each stack
    assert sum(p.numel() for p in wrapped.parameters()) == ours.num_parameters() + 4 * 32
    logits = wrapped(reverse_task_sources(6, seed=100), torch.full((6, 3), BOS))
    assert logits.shape == (6, 3, VOCAB)
