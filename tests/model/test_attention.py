import pytest
import torch
from torch import nn

from tests.helpers.run_if import run_if
from transformer_nmt.model import MultiHeadAttention, scaled_dot_product_attention
from transformer_nmt.model.masks import causal_mask, decoder_self_attention_mask, padding_mask


def test_attention_math_matches_torch_sdpa_with_mask():
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 8)
    mask = padding_mask(torch.tensor([[1, 2, 3, 0, 0, 0, 0], [4, 5, 6, 7, 8, 9, 1]]), pad_id=0)
    ours, weights = scaled_dot_product_attention(q, k, v, mask)
    theirs = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)
    assert weights[0, :, :, 3:].abs().max() == 0  # padded keys get no weight
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 5))


def test_fully_masked_row_is_finite():
    q = k = v = torch.randn(1, 1, 4, 8)
    mask = torch.zeros(1, 1, 4, 4, dtype=torch.bool)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()


def test_all_pad_sequence_mask_keeps_softmax_finite_in_both_paths():
    ids = torch.zeros(1, 4, dtype=torch.long)
    mask = padding_mask(ids, pad_id=0)
    q = k = v = torch.randn(1, 2, 4, 8)
    fused = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    manual, _ = scaled_dot_product_attention(q, k, v, mask)
    assert torch.isfinite(fused).all()
    torch.testing.assert_close(manual, fused, atol=1e-6, rtol=1e-5)


def test_causal_mask_sees_only_the_past():
    mask = causal_mask(4, torch.device("cpu"))[0, 0]
    assert torch.equal(mask, torch.tril(torch.ones(4, 4, dtype=torch.bool)))
    offset = causal_mask(2, torch.device("cpu"), past=3)[0, 0]
    assert offset.shape == (2, 5)
    assert offset[0].tolist() == [True, True, True, True, False]
    assert offset[1].all()


def test_decoder_mask_keeps_start_symbol_even_when_it_is_the_pad_id():
    # Marian-style: decoder start == pad id == 0.
    mask = decoder_self_attention_mask(torch.tensor([[0, 5, 6, 0]]), pad_id=0)[0, 0]
    assert mask[:, 0].all()
    assert not mask[3, 3]  # trailing padding is hidden
    assert mask[2].tolist() == [True, True, True, False]


def copy_into_torch_mha(ours: MultiHeadAttention, d_model: int, n_heads: int) -> nn.Module:
    theirs = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
        theirs.out_proj.weight.copy_(ours.w_o.weight)
        theirs.out_proj.bias.copy_(ours.w_o.bias)
    return theirs.eval()


@pytest.mark.parametrize("attention", ["manual", "sdpa"])
def test_multi_head_attention_matches_torch_multihead_attention(attention):
    d_model, n_heads = 32, 4
    d_k = d_model // n_heads
    ours = MultiHeadAttention(d_model, n_heads, d_k, d_k, attention=attention).eval()
    theirs = copy_into_torch_mha(ours, d_model, n_heads)
    x, memory = torch.randn(3, 6, d_model), torch.randn(3, 9, d_model)
    src = torch.tensor([[1] * 9, [1] * 5 + [0] * 4, [1] * 2 + [0] * 7])
    causal = causal_mask(6, x.device)

    # encoder self-attention with source padding
    self_ids = src[:, :6]
    expected, _ = theirs(x, x, x, key_padding_mask=self_ids == 0)
    torch.testing.assert_close(ours(x, x, padding_mask(self_ids, 0)), expected, atol=1e-5, rtol=0)
    # decoder causal self-attention
    expected, _ = theirs(x, x, x, attn_mask=~causal[0, 0])
    torch.testing.assert_close(ours(x, x, causal), expected, atol=1e-5, rtol=0)
    # cross-attention with source padding
    expected, _ = theirs(x, memory, memory, key_padding_mask=src == 0)
    torch.testing.assert_close(ours(x, memory, padding_mask(src, 0)), expected, atol=1e-5, rtol=0)


def test_captured_weights_are_distributions_over_real_keys():
    mha = MultiHeadAttention(16, 2, 8, 8, attention="sdpa").eval()
    mha.capture_weights = True
    ids = torch.tensor([[3, 4, 0]])
    x = torch.randn(1, 3, 16)
    mha(x, x, padding_mask(ids, 0))
    assert mha.weights.shape == (1, 2, 3, 3)
    torch.testing.assert_close(mha.weights.sum(-1), torch.ones(1, 2, 3))
    assert mha.weights[..., 2].abs().max() == 0


@run_if(min_gpus=1)
def test_fused_attention_on_a_gpu_avoids_cudnn_and_equals_the_written_out_maths():
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    mha = MultiHeadAttention(64, 4, 16, 16, attention="sdpa").cuda().train()
    manual = MultiHeadAttention(64, 4, 16, 16, attention="manual").cuda().train()
    manual.load_state_dict(mha.state_dict())
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for length in (7, 13, 21):  # a new shape each call, as token buckets give
            ids = torch.randint(1, 9, (5, length), device="cuda")
            ids[1, length // 2 :] = 0
            x = torch.randn(5, length, 64, device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                fused, written_out = (
                    mha(x, x, padding_mask(ids, 0)),
                    manual(x, x, padding_mask(ids, 0)),
                )
            torch.testing.assert_close(fused, written_out, atol=2e-2, rtol=2e-2)
    ops = {event.key for event in profiler.key_averages()}
    assert not any("cudnn_attention" in op for op in ops), sorted(ops)
