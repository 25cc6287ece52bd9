"""Before a converted model is published, its teacher-forced logits are compared with ours on a
small probe batch: a wrong layout shows up as differences of whole units, float noise does not."""

from __future__ import annotations

import torch
from torch import Tensor

from transformer_nmt.model import Transformer, TransformerConfig

TOLERANCE = 1e-4  # relative to the largest |logit| of the probe batch


def probe_batch(
    config: TransformerConfig, bos_id: int, eos_id: int, pad_id: int, seed: int = 0
) -> tuple[Tensor, Tensor]:
    """(src_ids, tgt_in_ids) [3, 6] with padding: random ordinary tokens + EOS as sources, the
    decoder start + the same tokens as decoder inputs."""
    generator = torch.Generator().manual_seed(seed)
    specials = {pad_id, bos_id, eos_id}
    ordinary = torch.tensor([i for i in range(config.tgt_vocab_size) if i not in specials])
    lengths = [min(n, config.max_len - 1) for n in (5, 3, 1)]
    src = torch.full((len(lengths), max(lengths) + 1), pad_id)
    tgt_in = torch.full_like(src, pad_id)
    for row, length in enumerate(lengths):
        body = ordinary[torch.randint(len(ordinary), (length,), generator=generator)]
        src[row, : length + 1] = torch.cat([body, torch.tensor([eos_id])])
        tgt_in[row, : length + 1] = torch.cat([torch.tensor([bos_id]), body])
    return src, tgt_in


def our_logits(model: Transformer, src_ids: Tensor, tgt_in_ids: Tensor) -> Tensor:
    """The model's logits [B, T, V] in eval mode, as float32 on the CPU; its mode is kept."""
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            device = next(model.parameters()).device
            return model(src_ids.to(device), tgt_in_ids.to(device)).float().cpu()
    finally:
        model.train(was_training)


def check_same_logits(
    expected: Tensor, actual: Tensor, tgt_in_ids: Tensor, pad_id: int, what: str
) -> float:
    """The largest |difference| of the logits at real (non-pad) decoder positions; raises if it
    exceeds :data:`TOLERANCE` × the largest |logit|."""
    real = tgt_in_ids != pad_id
    real[:, 0] = True  # the decoder start, which may be the pad id
    difference = (expected - actual)[real].abs().max().item()
    scale = max(1.0, expected[real].abs().max().item())
    if not difference <= TOLERANCE * scale:
        raise RuntimeError(
            f"{what}: its logits differ from ours by up to {difference:.3g} (logits up to "
            f"{scale:.3g}); nothing was written"
        )
    return difference
