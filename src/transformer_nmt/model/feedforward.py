"""Position-wise feed-forward network (paper §3.3)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

# The non-linearity between the two linear transformations: the paper's ReLU, or the swish
# x·σ(x) (SiLU) of Marian's models (opus-mt), so that they can be imported and fine-tuned.
ACTIVATIONS = {"relu": F.relu, "swish": F.silu}


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, applied to each position alike.

    ``activation="swish"`` replaces max(0, ·) by x·σ(x).
    """

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu") -> None:
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.activation = ACTIVATIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        """[B, T, d_model] -> [B, T, d_model]"""
        return self.w_2(self.activation(self.w_1(x)))
