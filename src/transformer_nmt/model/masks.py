"""Attention masks. Convention throughout: a boolean mask where True means "may attend".

Masks broadcast against attention scores of shape [B, h, T_query, T_key].
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """Key-padding mask [B, 1, 1, S]: True at real tokens.

    A sequence made only of padding would leave every query with nothing to attend to;
    such a row is opened up entirely so that softmax stays finite (its output is ignored).
    """
    keep = ids != pad_id  # [B, S]
    keep = keep | ~keep.any(dim=-1, keepdim=True)
    return keep[:, None, None, :]


def causal_mask(length: int, device: torch.device, past: int = 0) -> Tensor:
    """Look-ahead mask [1, 1, T, past + T]: query i (absolute position past + i) sees keys <= it."""
    query_pos = torch.arange(past, past + length, device=device)[:, None]
    key_pos = torch.arange(past + length, device=device)[None, :]
    return (key_pos <= query_pos)[None, None]


def decoder_self_attention_mask(tgt_ids: Tensor, pad_id: int) -> Tensor:
    """Look-ahead mask combined with target padding: [B, 1, T, T].

    Position 0 holds the decoder start symbol and always stays visible, because some
    tokenizers (Marian's) use the pad id as the decoder start token.
    """
    keep = tgt_ids != pad_id  # [B, T]
    keep[:, 0] = True
    return causal_mask(tgt_ids.size(1), tgt_ids.device) & keep[:, None, None, :]
