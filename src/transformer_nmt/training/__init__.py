"""Training: the LightningModule, LR schedules, callbacks, loggers and ``train(cfg)``."""

from transformer_nmt.training.module import TranslationModule
from transformer_nmt.training.run import resolve_model_config, train
from transformer_nmt.training.schedules import StepSchedule, inverse_sqrt, linear_warmup, noam

__all__ = [
    "StepSchedule",
    "TranslationModule",
    "inverse_sqrt",
    "linear_warmup",
    "noam",
    "resolve_model_config",
    "train",
]
