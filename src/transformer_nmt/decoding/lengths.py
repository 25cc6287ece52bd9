"""How long an output may grow, and the GNMT length penalty that ranks finished outputs."""

from __future__ import annotations

import torch
from torch import Tensor


def gnmt_length_penalty(length: int | float | Tensor, alpha: float) -> float | Tensor:
    """lp(Y) = ((5 + |Y|) / 6)^α (Wu et al., 2016); |Y| counts the EOS token.

    A hypothesis' score is its summed log-probability divided by lp. α = 0 ranks by plain
    log-probability; the paper uses α = 0.6.
    """
    return ((5 + length) / 6) ** alpha


def source_lengths(src_ids: Tensor, pad_id: int) -> Tensor:
    """Number of real (non-pad) tokens per row of src_ids [B, S], its EOS included: [B]."""
    return (src_ids != pad_id).sum(dim=1)


def max_output_lengths(
    src_ids: Tensor, pad_id: int, max_len_a: float, max_len_b: int, model_max_len: int
) -> Tensor:
    """Most output tokens (EOS not counted) per sentence: ⌊a·(source words) + b⌋, the paper's
    "input length + 50" with a = 1, b = 50 (§6.1), at most ``model_max_len - 1`` (the decoder's
    positions), and 0 for an empty (all-pad) source.

    Source words are the source's tokens less the EOS that ends every source row (the data
    module and the translator append it), so a source of 3 words + EOS may grow to 53 tokens.
    """
    lengths = source_lengths(src_ids, pad_id)
    words = (lengths - 1).clamp(min=0)
    limits = torch.floor(words.double() * max_len_a + max_len_b).long()
    limits = limits.clamp(min=0, max=model_max_len - 1)
    return limits.masked_fill(lengths == 0, 0)
