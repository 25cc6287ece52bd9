"""The training method: the LightningModule, label-smoothed loss, Adam, learning-rate schedules."""

from typing import Any

from transformer_nmt.training.optimizer import AdamConfig, build_adam
from transformer_nmt.training.schedules import StepSchedule, inverse_sqrt, linear_warmup, noam

__all__ = [
    "AdamConfig",
    "StepSchedule",
    "TranslationModule",
    "build_adam",
    "inverse_sqrt",
    "linear_warmup",
    "noam",
]


def __getattr__(name: str) -> Any:
    # The module imports Lightning, which takes seconds: only when it is asked for, so that
    # reading the config schemas (`python train.py --cfg job`) stays fast.
    if name == "TranslationModule":
        from transformer_nmt.training.module import TranslationModule

        return TranslationModule
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
