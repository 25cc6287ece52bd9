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
    # One kernel for the whole update, which a non-finite step turns into a no-op on the device
    # (``update.NonFiniteSteps``). null: fused where the parameters are on a GPU; elsewhere
    # torch's for-each implementation (the two agree to rounding, not bit for bit).
    fused: bool | None = None


def build_adam(parameters: Iterable[torch.nn.Parameter], config: AdamConfig) -> torch.optim.Adam:
    """Adam with base lr 1.0: the schedule's multiplier *is* the learning rate (schedules.py)."""
    parameters = list(parameters)
    fused = config.fused
    if fused is None:
        fused = bool(parameters) and parameters[0].is_cuda
    return torch.optim.Adam(
        parameters,
        lr=1.0,
        betas=tuple(config.betas),
        eps=config.eps,
        weight_decay=config.weight_decay,
        fused=fused or None,
    )
