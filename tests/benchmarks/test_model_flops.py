"""The model FLOPs of the GPU benchmark (the numerator of its MFU) against PyTorch's own count."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.bench_gpu import training_flops
from tests.helpers.tiny_model import tiny_config
from transformer_nmt.model import Transformer


@pytest.mark.parametrize("src_len, tgt_len", [(7, 5), (4, 9)])
def test_model_flops_are_three_forwards_of_the_matrix_products_pytorch_counts(src_len, tgt_len):
    config = tiny_config(
        src_vocab_size=50, tgt_vocab_size=60, d_k=6, d_v=10, d_ff=48, n_decoder_layers=3,
        dropout=0.0, attention="manual",
    )  # fmt: skip
    model = Transformer(config).eval()
    batch = 3
    src = torch.randint(1, 50, (batch, src_len))
    tgt = torch.randint(1, 60, (batch, tgt_len))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(src, tgt)
    # PyTorch counts the decoder's whole T x T score and weight products; the benchmark counts the
    # causal half that the model needs.
    masked = tgt_len * tgt_len - tgt_len * (tgt_len + 1) / 2
    not_needed = config.n_decoder_layers * 2 * batch * masked * config.n_heads * (6 + 10)
    expected = 3 * (counter.get_total_flops() - not_needed)
    assert training_flops(config, [src_len] * batch, [tgt_len] * batch) == pytest.approx(expected)
