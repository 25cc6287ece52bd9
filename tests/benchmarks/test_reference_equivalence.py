"""Our Transformer computes the same function as HF Marian given the same weights.

This checks the benchmarks' premise (``benchmarks/competitors.py`` builds Marian to our shape
and copies our weights into it), and is an independent check of the model itself: a
reference implementation agrees with ours on logits, greedy search and beam search.
"""

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

pytest.importorskip("transformers")

from competitors import TorchTransformerNMT, build_marian, copy_into_marian  # noqa: E402

from transformer_nmt.decoding import beam_search, greedy_search  # noqa: E402
from transformer_nmt.model import Transformer, TransformerConfig  # noqa: E402

from ..reverse_task import BOS, EOS, PAD, VOCAB, reverse_task_batch  # noqa: E402


def tiny(seed: int, attention: str = "sdpa") -> TransformerConfig:
    torch.manual_seed(seed)
    return TransformerConfig(
        src_vocab_size=VOCAB,
        tgt_vocab_size=VOCAB,
        share_all_embeddings=True,
        d_model=32,
        n_heads=4,
        n_encoder_layers=2,
        n_decoder_layers=2,
        d_ff=64,
        max_len=64,
        pad_id=PAD,
        attention=attention,
    )


def pair(seed: int, attention: str = "sdpa", train_steps: int = 0):
    """Our model (after ``train_steps`` Adam steps on the reverse task) and Marian with its
    weights. Trained a little, outputs end by EOS at varying steps and beams disagree with
    greedy search; an untrained model mostly repeats one token."""
    config = tiny(seed, attention)
    ours = Transformer(config)
    optimizer = torch.optim.Adam(ours.parameters(), lr=3e-3, betas=(0.9, 0.98))
    generator = torch.Generator().manual_seed(seed)
    for _ in range(train_steps):
        src, tgt_in, labels = reverse_task_batch(32, generator)
        loss = F.cross_entropy(ours(src, tgt_in).transpose(1, 2), labels, ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    ours.eval()
    marian = build_marian(config, bos_id=BOS, eos_id=EOS).eval()
    copy_into_marian(ours, marian)
    return ours, marian


def sources(seed: int, n: int = 16) -> torch.Tensor:
    """Reverse-task sources of 1 to 8 symbols + EOS, padded."""
    src, _, _ = reverse_task_batch(n, torch.Generator().manual_seed(100 + seed))
    return src


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
    ours, marian = pair(0, attention)
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
def trained_pair():
    return pair(0, train_steps=60)


@pytest.mark.parametrize("seed", range(3))
def test_greedy_and_beam_search_match_marian_generate(trained_pair, seed):
    ours, marian = trained_pair
    src = sources(seed)
    steps = 10
    assert greedy_search(ours, src, BOS, EOS, max_len_a=0.0, max_len_b=steps) == (
        marian_generate(marian, src, beams=1, steps=steps)
    )
    hypotheses = beam_search(
        ours, src, BOS, EOS, beam_size=4, length_penalty=0.0, max_len_a=0.0, max_len_b=steps
    )
    assert [h[0].tokens for h in hypotheses] == marian_generate(marian, src, beams=4, steps=steps)


def test_competitors_have_our_shape():
    config = tiny(0)
    ours = Transformer(config)
    marian = build_marian(config)
    trainable = sum(p.numel() for p in marian.parameters() if p.requires_grad)
    assert trainable == ours.num_parameters()
    wrapped = TorchTransformerNMT(config)
    # nn.Transformer adds one LayerNorm (weight + bias) after each stack
    assert sum(p.numel() for p in wrapped.parameters()) == ours.num_parameters() + 4 * 32
    logits = wrapped(sources(0, n=6), torch.full((6, 3), BOS))
    assert logits.shape == (6, 3, VOCAB)
