"""Attention maps of a model: what every map of each kind must be, the same on either attention
path, unchanged by padding, dropout or the model's mode."""

import numpy as np
import pytest
import torch

from tests.helpers.tiny_model import PAD, tiny_config
from transformer_nmt.evaluation.attention import (
    KINDS,
    SentenceMaps,
    attention_figure,
    attention_for_pair,
    attention_maps,
    load_attention_maps,
    record_attention,
)
from transformer_nmt.model import Transformer

# Row 0 fills both widths; row 1 is shorter on both sides (padded).
SRC = torch.tensor([[5, 6, 7, 8, 9, 2], [5, 11, 2, PAD, PAD, PAD]])
TGT = torch.tensor([[1, 4, 5, 6, 7], [1, 8, 9, PAD, PAD]])


def model(**overrides) -> Transformer:
    return Transformer(tiny_config(n_layers=2, n_heads=4, dropout=0.3, **overrides))


def test_maps_have_one_row_per_query_summing_to_one_per_layer_and_head():
    maps = attention_maps(model(), SRC, TGT)
    assert set(maps) == set(KINDS)
    assert maps["encoder_self"].shape == (2, 2, 4, 6, 6)  # [B, layers, heads, queries, keys]
    assert maps["decoder_self"].shape == (2, 2, 4, 5, 5)
    assert maps["cross"].shape == (2, 2, 4, 5, 6)
    for weights in maps.values():
        assert weights.dtype == torch.float32 and (weights >= 0).all()
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))


def test_decoder_self_attention_is_zero_above_the_diagonal():
    weights = attention_maps(model(), SRC, TGT, kinds=["decoder_self"])["decoder_self"]
    future = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)
    assert weights[..., future].abs().max() == 0
    assert (weights[..., ~future][0] > 0).all()  # the unpadded row sees every past position


def test_padded_source_and_target_keys_get_no_weight():
    maps = attention_maps(model(), SRC, TGT)
    assert maps["cross"][1, :, :, :, 3:].abs().max() == 0
    assert maps["encoder_self"][1, :, :, :, 3:].abs().max() == 0
    assert maps["decoder_self"][1, :, :, :, 3:].abs().max() == 0
    assert (maps["cross"][1, :, :, :3, :3] > 0).all()


def test_a_padded_row_has_the_maps_of_the_pair_alone():
    net = model()
    batch = attention_maps(net, SRC, TGT)
    alone = attention_for_pair(net, SRC[1, :3], TGT[1, :3])
    assert alone["cross"].shape == (2, 4, 3, 3)
    torch.testing.assert_close(batch["cross"][1, :, :, :3, :3], alone["cross"])
    torch.testing.assert_close(batch["encoder_self"][1, :, :, :3, :3], alone["encoder_self"])
    torch.testing.assert_close(batch["decoder_self"][1, :, :, :3, :3], alone["decoder_self"])


def test_the_fused_path_is_mapped_by_the_weights_it_computes_with():
    fused = model(attention="sdpa").eval()
    manual = model(attention="manual").eval()
    manual.load_state_dict(fused.state_dict())
    fused_maps, manual_maps = attention_maps(fused, SRC, TGT), attention_maps(manual, SRC, TGT)
    for kind in KINDS:
        torch.testing.assert_close(fused_maps[kind], manual_maps[kind])
    # and the explicit path under capture gives the fused kernel's output: the same weights
    with torch.no_grad():
        plain = fused(SRC, TGT)
        with fused.capture_attention():
            captured = fused(SRC, TGT)
    torch.testing.assert_close(captured, plain, atol=1e-5, rtol=1e-5)
    assert all(not module.capture_weights for _, module in fused.attention_modules())


def test_dropout_is_off_and_the_model_keeps_its_mode():
    net = model().train()
    first = attention_maps(net, SRC, TGT, kinds=["cross"])
    second = attention_maps(net, SRC, TGT, kinds=["cross"])
    assert net.training
    torch.testing.assert_close(first["cross"], second["cross"], rtol=0, atol=0)
    assert set(first) == {"cross"}
    with pytest.raises(ValueError, match=r"unknown attention kind\(s\) \['self'\]"):
        attention_maps(net, SRC, TGT, kinds=["self"])


def test_figure_labels_every_token_on_its_axis():
    weights = attention_for_pair(model(), SRC[0], TGT[0], kinds=["cross"])["cross"]
    source, target = ["a", "b", "c", "d", "e", "</s>"], ["<s>", "v", "w", "x", "y"]
    panels = [(f"layer {i}", layer.mean(0)) for i, layer in enumerate(weights)]
    figure = attention_figure(panels, queries=target, keys=source, title="cross")
    first, second = figure.axes
    assert [label.get_text() for label in first.get_xticklabels()] == source
    assert [label.get_text() for label in first.get_yticklabels()] == target
    assert [label.get_text() for label in second.get_xticklabels()] == source
    assert not second.get_yticklabels()  # the row's queries are labelled once, on the left
    largest = max(float(layer.mean(0).max()) for layer in weights)  # one scale for all panels
    assert figure.get_suptitle() == f"cross (colour: 0 to {largest:.2f})"
    assert first.get_images()[0].get_clim() == pytest.approx((0.0, largest))
    assert second.get_title() == "layer 1"
    image = first.get_images()[0].get_array()
    assert image.shape == (5, 6)
    torch.testing.assert_close(torch.as_tensor(image.data), weights[0].mean(0))


def test_a_validation_record_holds_every_view_as_png_and_the_maps_read_back(tmp_path):
    net = model()
    source, target = ["a", "b", "c", "d", "e", "</s>"], ["<s>", "v", "w", "x", "y"]
    short = attention_for_pair(net, SRC[1, :3], TGT[1, :3], kinds=["cross", "decoder_self"])
    long = attention_for_pair(net, SRC[0], TGT[0], kinds=["cross", "decoder_self"])
    as_numpy = lambda maps: {kind: weights.numpy() for kind, weights in maps.items()}  # noqa: E731
    sentences = [
        SentenceMaps(["a", "b", "</s>"], ["<s>", "v", "w"], as_numpy(short)),
        SentenceMaps(source, target, as_numpy(long)),
    ]
    written = record_attention(tmp_path, 40, sentences)
    names = [f"sentence_{i}/{kind}_{view}" for i in (0, 1) for kind in ("cross", "decoder_self")
             for view in ("mean", "heads")]  # fmt: skip
    assert [name for name, *_ in written] == names
    for name, path, png, height, width in written:
        assert path == tmp_path / "step_000040" / f"{name.replace('/', '_')}.png"
        assert path.read_bytes() == png and png.startswith(b"\x89PNG") and height < width
    step, loaded = load_attention_maps(tmp_path / "maps.npz")
    assert step == 40 and loaded[1].src_tokens == source and loaded[1].tgt_tokens == target
    assert loaded[0].src_tokens == ["a", "b", "</s>"]
    for kind in ("cross", "decoder_self"):
        np.testing.assert_array_equal(loaded[1].maps[kind], long[kind].numpy())
    assert not list(tmp_path.glob("**/.*tmp"))  # written atomically
