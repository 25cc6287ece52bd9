"""Adam as the paper trains with it (§5.3); the learning rate comes from the schedule."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch


@dataclass
class AdamConfig:
    """β1 = 0.9, β2 = 0.98, ε = 1e-9 (the paper); the schema of the ``optimizer`` config node."""

    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    weight_decay: float = 0.0


def build_adam(parameters: Iterable[torch.nn.Parameter], config: AdamConfig) -> torch.optim.Adam:
    """Adam with base lr 1.0: the schedule's multiplier *is* the learning rate (schedules.py)."""
    return torch.optim.Adam(
        parameters,
        lr=1.0,
        betas=tuple(config.betas),
        eps=config.eps,
        weight_decay=config.weight_decay,
    )
