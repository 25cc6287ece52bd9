import math

import pytest
import torch

from tests.helpers.tiny_model import PAD, tiny_config
from transformer_nmt.model import Transformer
from transformer_nmt.model.positional import SinusoidalPositionalEncoding


def random_ids(vocab: int, *shape: int) -> torch.Tensor:
    return torch.randint(PAD + 1, vocab, shape)


@pytest.mark.parametrize("attention", ["manual", "sdpa"])
def test_logits_shape(make_model, norm, attention):
    model = make_model(norm=norm, attention=attention)
    logits = model(random_ids(23, 3, 7), random_ids(19, 3, 5))
    assert logits.shape == (3, 5, 19)
    assert logits.dtype == torch.float32


def test_hidden_states_are_what_the_pre_softmax_linear_projects(make_model, norm):
    """``decode``/``forward`` are ``output_projection`` applied to
    ``decode_hidden``/``forward_hidden``."""
    model = make_model(norm=norm)
    src, tgt = random_ids(23, 3, 7), random_ids(19, 3, 5)
    hidden = model.forward_hidden(src, tgt)
    assert hidden.shape == (3, 5, model.config.d_model)
    assert torch.equal(model.output_projection(hidden), model(src, tgt))
    memory = model.encode(src)
    assert torch.equal(model.decode_hidden(tgt, memory, src), hidden)


@pytest.mark.parametrize("attention", ["manual", "sdpa"])
def test_causality_future_targets_do_not_change_past_logits(make_model, norm, attention):
    model = make_model(norm=norm, attention=attention)
    src, tgt = random_ids(23, 2, 6), random_ids(19, 2, 8)
    for t in range(tgt.size(1) - 1):
        changed = tgt.clone()
        changed[:, t + 1 :] = random_ids(19, 2, tgt.size(1) - t - 1)
        before, after = model(src, tgt), model(src, changed)
        torch.testing.assert_close(after[:, : t + 1], before[:, : t + 1], atol=1e-5, rtol=0)
        # The check has teeth: the changed positions themselves do see the change.
        assert not torch.allclose(after[:, t + 1 :], before[:, t + 1 :], atol=1e-3)


@pytest.mark.parametrize("attention", ["manual", "sdpa"])
def test_padding_invariance_source_and_target(make_model, norm, attention):
    model = make_model(norm=norm, attention=attention)
    src, tgt = random_ids(23, 1, 6), random_ids(19, 1, 5)
    reference = model(src, tgt)
    padded_src = torch.cat([src, torch.full((1, 4), PAD)], dim=1)
    padded_tgt = torch.cat([tgt, torch.full((1, 3), PAD)], dim=1)
    torch.testing.assert_close(model(padded_src, tgt), reference, atol=1e-5, rtol=0)
    torch.testing.assert_close(model(padded_src, padded_tgt)[:, :5], reference, atol=1e-5, rtol=0)


def test_padding_invariance_within_a_batch(make_model, norm):
    """A sentence batched with a longer one gives the same logits as on its own."""
    model = make_model(norm=norm)
    short_src, short_tgt = random_ids(23, 1, 4), random_ids(19, 1, 3)
    long_src, long_tgt = random_ids(23, 1, 9), random_ids(19, 1, 7)
    src = torch.cat([torch.cat([short_src, torch.full((1, 5), PAD)], 1), long_src])
    tgt = torch.cat([torch.cat([short_tgt, torch.full((1, 4), PAD)], 1), long_tgt])
    batched = model(src, tgt)
    torch.testing.assert_close(batched[:1, :3], model(short_src, short_tgt), atol=1e-5, rtol=0)
    torch.testing.assert_close(batched[1:], model(long_src, long_tgt), atol=1e-5, rtol=0)


def test_manual_and_sdpa_attention_agree(norm):
    manual = Transformer(tiny_config(norm=norm, attention="manual")).eval()
    fused = Transformer(tiny_config(norm=norm, attention="sdpa")).eval()
    fused.load_state_dict(manual.state_dict())
    src = torch.cat([random_ids(23, 2, 6), torch.full((2, 2), PAD)], dim=1)
    tgt = torch.cat([random_ids(19, 2, 5), torch.full((2, 1), PAD)], dim=1)
    torch.testing.assert_close(fused(src, tgt), manual(src, tgt), atol=1e-5, rtol=0)


def test_post_norm_and_pre_norm_really_differ():
    post = Transformer(tiny_config(norm="post")).eval()
    pre = Transformer(tiny_config(norm="pre")).eval()
    pre.load_state_dict(post.state_dict(), strict=False)  # same weights; pre has 2 more norms
    src, tgt = random_ids(23, 2, 6), random_ids(19, 2, 5)
    assert not torch.allclose(pre(src, tgt), post(src, tgt), atol=1e-3)


def test_gradients_reach_every_parameter(norm):
    model = Transformer(tiny_config(norm=norm, positional="learned", output_bias=True)).train()
    logits = model(random_ids(23, 3, 6), random_ids(19, 3, 5))
    logits.logsumexp(-1).sum().backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None, name
        assert parameter.grad.abs().sum() > 0, name


def test_embeddings_are_tied_to_the_output_projection():
    model = Transformer(tiny_config(tgt_vocab_size=23, share_all_embeddings=True))
    assert model.output_projection.weight is model.decoder.embedding.weight
    assert model.encoder.embedding is model.decoder.embedding
    untied = Transformer(tiny_config(tie_embeddings=False))
    assert untied.output_projection.weight is not untied.decoder.embedding.weight


def test_swish_activation_is_x_times_sigmoid_x_in_the_feed_forward_network(make_model):
    relu, swish = make_model(), make_model(activation="swish")
    swish.load_state_dict(relu.state_dict())
    ffn = swish.encoder.layers[0].feed_forward
    x = torch.randn(2, 3, 32)
    hidden = ffn.w_1(x)
    torch.testing.assert_close(ffn(x), ffn.w_2(hidden * torch.sigmoid(hidden)))
    assert not torch.allclose(relu.encoder.layers[0].feed_forward(x), ffn(x))  # not ReLU


def test_output_bias_starts_at_zero_and_is_added_to_the_logits(make_model):
    model = make_model(output_bias=True, tgt_vocab_size=23, share_all_embeddings=True)
    assert model.output_projection.weight is model.decoder.embedding.weight  # still tied
    assert torch.equal(model.output_projection.bias, torch.zeros(23))
    src, tgt = random_ids(23, 2, 5), random_ids(23, 2, 4)
    before = model(src, tgt)
    with torch.no_grad():
        model.output_projection.bias.copy_(torch.arange(23.0))
    torch.testing.assert_close(model(src, tgt), before + torch.arange(23.0))
    assert make_model().output_projection.bias is None  # the paper's projection has none


def test_embeddings_are_scaled_by_sqrt_d_model(make_model):
    model = make_model()
    ids = torch.tensor([[3]])
    expected = model.encoder.embedding.weight[3] * math.sqrt(32)
    torch.testing.assert_close(model.encoder.embedding(ids)[0, 0], expected)


def test_sinusoidal_encoding_follows_the_paper_formula():
    pe = SinusoidalPositionalEncoding(d_model=16, max_len=50)(50)
    pos, i = 37, 3
    torch.testing.assert_close(pe[pos, 2 * i], torch.tensor(math.sin(pos / 10000 ** (2 * i / 16))))
    torch.testing.assert_close(
        pe[pos, 2 * i + 1], torch.tensor(math.cos(pos / 10000 ** (2 * i / 16)))
    )


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_too_long_input_names_max_len(make_model, positional):
    model = make_model(positional=positional, max_len=8)
    with pytest.raises(ValueError, match="max_len=8"):
        model(random_ids(23, 1, 9), random_ids(19, 1, 3))


def test_incremental_decoding_with_cache_matches_full_decoding(make_model, norm):
    model = make_model(norm=norm)
    src = torch.cat([random_ids(23, 2, 6), torch.full((2, 2), PAD)], dim=1)
    tgt = random_ids(19, 2, 7)
    memory = model.encode(src)
    full = model.decode(tgt, memory, src)
    cache = model.new_cache()
    steps = [model.decode(tgt[:, t : t + 1], memory, src, cache) for t in range(tgt.size(1))]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    assert cache.length == 7
    # Several positions at once through the cache use a look-ahead mask with an offset.
    cache = model.new_cache()
    first = model.decode(tgt[:, :3], memory, src, cache)
    rest = model.decode(tgt[:, 3:], memory, src, cache)
    torch.testing.assert_close(torch.cat([first, rest], dim=1), full, atol=1e-5, rtol=0)


def test_cache_reorder_follows_selected_rows(make_model):
    model = make_model()
    src, tgt = random_ids(23, 3, 5), random_ids(19, 3, 4)
    memory = model.encode(src)
    cache = model.new_cache()
    model.decode(tgt[:, :3], memory, src, cache)
    order = torch.tensor([2, 0, 0])
    cache.reorder(order)
    cache.select_sources(order)
    step = model.decode(tgt[order, 3:], memory[order], src[order], cache)
    full = model.decode(tgt[order], memory[order], src[order])
    torch.testing.assert_close(step[:, 0], full[:, 3], atol=1e-5, rtol=0)


@pytest.mark.parametrize("attention", ["sdpa", "manual"])
def test_hypotheses_of_one_source_share_its_memory_through_the_cache(make_model, norm, attention):
    """k consecutive target rows per source against one copy of the memory, through a cache,
    give the logits of the memory repeated k times, one position or several at a time;
    reordering the hypotheses alone leaves the shared cross-attention cache valid."""
    model = make_model(norm=norm, attention=attention)
    k = 3
    src = torch.cat([random_ids(23, 2, 6), torch.full((2, 2), PAD)], dim=1)
    src[1, 3:] = PAD
    tgt = random_ids(19, 2 * k, 5)
    memory = model.encode(src)
    repeated_memory, repeated_src = memory.repeat_interleave(k, 0), src.repeat_interleave(k, 0)
    repeated = model.decode(tgt, repeated_memory, repeated_src)
    at_once = model.decode(tgt, memory, src, model.new_cache())
    torch.testing.assert_close(at_once, repeated, atol=1e-5, rtol=0)
    cache = model.new_cache()
    steps = [model.decode(tgt[:, t : t + 1], memory, src, cache) for t in range(4)]
    torch.testing.assert_close(torch.cat(steps, dim=1), repeated[:, :4], atol=1e-5, rtol=0)
    assert cache.cross_attention[0][0].size(0) == 2  # one row per source, not per hypothesis
    parents = torch.tensor([2, 2, 0, 5, 3, 3])  # each source's hypotheses pick their parents
    cache.reorder(parents)
    step = model.decode(tgt[parents, 4:], memory, src, cache)
    full = model.decode(tgt[parents], repeated_memory, repeated_src)
    torch.testing.assert_close(step[:, 0], full[:, 4], atol=1e-5, rtol=0)


def test_target_rows_that_do_not_fit_the_sources_are_refused(make_model):
    model = make_model()
    src = random_ids(23, 2, 4)
    memory = model.encode(src)
    with pytest.raises(ValueError, match="5 target rows cannot share 2 sources"):
        model.decode(random_ids(19, 5, 1), memory, src, model.new_cache())
    with pytest.raises(ValueError, match="4 target rows for 2 sources: give one row of memory"):
        model.decode(random_ids(19, 4, 3), memory, src)  # sharing a source needs a cache


def test_capture_attention_returns_every_map(make_model):
    model = make_model(attention="sdpa")
    src = torch.cat([random_ids(23, 1, 4), torch.full((1, 2), PAD)], dim=1)
    tgt = random_ids(19, 1, 5)
    with model.capture_attention() as maps:
        model(src, tgt)
    assert set(maps) == {
        "encoder.layers.0.self_attention",
        "encoder.layers.1.self_attention",
        "decoder.layers.0.self_attention",
        "decoder.layers.0.cross_attention",
        "decoder.layers.1.self_attention",
        "decoder.layers.1.cross_attention",
    }
    assert maps["encoder.layers.0.self_attention"].shape == (1, 4, 6, 6)
    assert maps["decoder.layers.1.cross_attention"].shape == (1, 4, 5, 6)
    causal = maps["decoder.layers.0.self_attention"][0, 0]
    assert torch.triu(causal, diagonal=1).abs().max() == 0
    assert maps["decoder.layers.0.cross_attention"][..., 4:].abs().max() == 0
    assert all(not m.capture_weights for _, m in model.attention_modules())
