import pytest

from tests.helpers.tiny_model import tiny_config
from transformer_nmt.model import Transformer, TransformerConfig


@pytest.mark.parametrize(
    ("overrides", "names"),
    [
        ({"d_model": 30, "n_heads": 4}, ["d_model", "n_heads"]),
        ({"norm": "sandwich"}, ["norm", "'post'", "'pre'"]),
        ({"positional": "rotary"}, ["positional", "'sinusoidal'", "'learned'"]),
        ({"attention": "flash"}, ["attention", "'manual'", "'sdpa'"]),
        ({"activation": "gelu"}, ["activation", "'relu'", "'swish'"]),
        ({"d_model": 0}, ["d_model"]),
        ({"n_heads": -1}, ["n_heads"]),
        ({"n_encoder_layers": 0}, ["n_encoder_layers"]),
        ({"d_ff": 0}, ["d_ff"]),
        ({"max_len": 0}, ["max_len"]),
        ({"src_vocab_size": 0}, ["src_vocab_size"]),
        ({"dropout": 1.5}, ["dropout"]),
        ({"pad_id": 99}, ["pad_id"]),
        ({"share_all_embeddings": True}, ["share_all_embeddings", "src_vocab_size"]),
    ],
)
def test_invalid_config_names_the_field(overrides, names):
    with pytest.raises(ValueError) as error:
        tiny_config(**overrides)
    for name in names:
        assert name in str(error.value)


def test_explicit_d_k_and_d_v_lift_the_divisibility_rule():
    config = tiny_config(d_model=30, n_heads=4, d_k=8, d_v=6)
    attention = Transformer(config).encoder.layers[0].self_attention
    assert attention.w_q.out_features == attention.w_k.out_features == 4 * 8
    assert attention.w_v.out_features == attention.w_o.in_features == 4 * 6
    assert attention.w_o.out_features == 30


def test_d_k_and_d_v_default_to_d_model_over_h_and_n_layers_fills_both_stacks():
    config = tiny_config(d_model=32, n_heads=4, n_layers=3, n_encoder_layers=None)
    assert (config.d_k, config.d_v) == (8, 8)
    assert (config.n_encoder_layers, config.n_decoder_layers) == (3, 2)


def test_base_model_parameter_count_matches_the_paper_arithmetic():
    """Paper base model, 37000 shared BPE vocabulary, all three embeddings tied."""
    vocab, d, d_ff, n = 37000, 512, 2048, 6
    embedding = vocab * d  # one matrix: source, target, pre-softmax
    attention = 4 * (d * d + d)  # W^Q, W^K, W^V, W^O with biases
    ffn = (d * d_ff + d_ff) + (d_ff * d + d)
    layer_norm = 2 * d
    encoder_layer = attention + ffn + 2 * layer_norm
    decoder_layer = 2 * attention + ffn + 3 * layer_norm
    expected = embedding + n * encoder_layer + n * decoder_layer
    assert expected == 63_082_496  # ≈63.1M; the paper's Table 3 rounds to 65M

    config = TransformerConfig(vocab, vocab, pad_id=0)  # the defaults share and tie
    assert Transformer(config).num_parameters() == expected


def test_untied_embeddings_add_their_matrices():
    tied = Transformer(tiny_config(tgt_vocab_size=23, share_all_embeddings=True))
    untied = Transformer(tiny_config(tgt_vocab_size=23, tie_embeddings=False))
    assert untied.num_parameters() - tied.num_parameters() == 2 * 23 * 32


def test_pre_norm_adds_final_layer_norms_only():
    post = Transformer(tiny_config(norm="post"))
    pre = Transformer(tiny_config(norm="pre"))
    assert pre.num_parameters() - post.num_parameters() == 2 * 2 * 32
