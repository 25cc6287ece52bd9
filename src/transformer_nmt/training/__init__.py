"""The training method: the LightningModule, label-smoothed loss, learning-rate schedules."""

from transformer_nmt.training.module import TranslationModule
from transformer_nmt.training.schedules import StepSchedule, inverse_sqrt, linear_warmup, noam

__all__ = ["StepSchedule", "TranslationModule", "inverse_sqrt", "linear_warmup", "noam"]
