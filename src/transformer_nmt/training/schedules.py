"""Learning-rate schedules, as the absolute learning rate at optimizer step 1, 2, 3, …

The optimizer is built with base lr 1.0 and a ``LambdaLR`` whose multiplier is the schedule, so
the schedule below *is* the learning rate. ``LambdaLR`` calls its multiplier with the number of
steps already taken (0 before the first step); :class:`StepSchedule` adds the 1, so step ``warmup``
of the paper is the ``warmup``-th optimizer step.

Any schedule may end in a *cooldown*: over the last ``cooldown`` steps before ``total_steps`` the
learning rate falls linearly to zero (the decay phase of warmup-stable-decay schedules), annealing
the weights that a run on a fixed step budget ends with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

SCHEDULES = ("noam", "inverse_sqrt", "linear_warmup")


def noam(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5) (paper eq. 3); peak at warmup."""
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def inverse_sqrt(step: int, warmup: int, peak_lr: float) -> float:
    """Linear warmup to ``peak_lr`` at ``warmup``, then peak_lr · sqrt(warmup / step) (fairseq)."""
    return peak_lr * min(step / warmup, math.sqrt(warmup / step))


def linear_warmup(step: int, warmup: int, peak_lr: float) -> float:
    """Linear warmup to ``peak_lr`` at ``warmup``, then constant."""
    return peak_lr * min(1.0, step / warmup)


def cooldown_factor(step: int, total_steps: int, cooldown: int) -> float:
    """1 until ``total_steps - cooldown``, then linearly down to 0 at ``total_steps`` and after."""
    return min(1.0, max(0.0, (total_steps - step) / cooldown))


@dataclass
class StepSchedule:
    """A picklable ``LambdaLR`` multiplier: the lr of optimizer step ``steps_taken + 1``.

    Also the schema of the ``scheduler`` config group; the defaults are the paper's (eq. 3).
    """

    d_model: int  # noam: the model's width
    name: str = "noam"  # noam | inverse_sqrt | linear_warmup
    warmup: int = 4000  # optimizer steps to the peak
    factor: float = 1.0  # noam: scales the whole curve
    peak_lr: float | None = None  # inverse_sqrt, linear_warmup: the lr at step ``warmup``
    cooldown: int = 0  # the last steps before ``total_steps``, over which the lr falls to 0
    total_steps: int | None = None  # the run's optimizer steps: where a cooldown ends

    def __post_init__(self) -> None:
        if self.name not in SCHEDULES:
            raise ValueError(
                f"unknown scheduler {self.name!r}; choose scheduler=<one of {', '.join(SCHEDULES)}>"
            )
        if not isinstance(self.warmup, int) or self.warmup < 1:
            raise ValueError(f"scheduler.warmup must be a positive integer, got {self.warmup!r}")
        if self.name == "noam" and not self.factor > 0:
            raise ValueError(f"scheduler.factor must be positive, got {self.factor!r}")
        if self.name != "noam" and (self.peak_lr is None or not self.peak_lr > 0):
            raise ValueError(
                f"scheduler={self.name} needs a positive scheduler.peak_lr, got {self.peak_lr!r}"
            )
        if not isinstance(self.cooldown, int) or self.cooldown < 0:
            raise ValueError(
                f"scheduler.cooldown must be a whole number of steps, got {self.cooldown!r}"
            )
        if self.cooldown and (
            not isinstance(self.total_steps, int) or not 0 < self.cooldown <= self.total_steps
        ):
            raise ValueError(
                f"scheduler.cooldown={self.cooldown} needs a run of at least as many optimizer "
                f"steps, got {self.total_steps!r}: set trainer.max_steps (scheduler.total_steps "
                f"follows it) to at least {self.cooldown}, or scheduler.cooldown=0 for none"
            )

    def lr(self, step: int) -> float:
        """The learning rate of optimizer step ``step`` (counted from 1)."""
        if self.name == "noam":
            lr = noam(step, self.d_model, self.warmup, self.factor)
        elif self.name == "inverse_sqrt":
            lr = inverse_sqrt(step, self.warmup, self.peak_lr)
        else:
            lr = linear_warmup(step, self.warmup, self.peak_lr)
        if self.cooldown:
            lr *= cooldown_factor(step, self.total_steps, self.cooldown)
        return lr

    def unfinished_cooldown(self, steps_taken: int) -> str | None:
        """What to warn of when training stopped before its cooldown brought the lr to 0
        (``max_time``, ``max_epochs`` or early stopping came first); None without one or after."""
        if not self.cooldown or steps_taken >= self.total_steps:
            return None
        return (
            f"training stopped at optimizer step {steps_taken:,} of trainer.max_steps="
            f"{self.total_steps:,} (max_time, max_epochs or early stopping came first), so the "
            f"scheduler.cooldown of {self.cooldown:,} steps did not finish: the last learning "
            f"rate was {self.lr(steps_taken):.3g}, not 0. Set trainer.max_steps to a budget the "
            "run reaches to anneal the weights."
        )

    def __call__(self, steps_taken: int) -> float:
        return self.lr(steps_taken + 1)


def build_scheduler(optimizer: Optimizer, schedule: StepSchedule) -> LambdaLR:
    """A LambdaLR stepping ``schedule``; the optimizer must have been built with lr=1.0."""
    base_lrs = {group["lr"] for group in optimizer.param_groups}
    if base_lrs != {1.0}:
        raise ValueError(
            f"build the optimizer with lr=1.0 (the schedule is the lr), got {base_lrs}"
        )
    return LambdaLR(optimizer, schedule)
