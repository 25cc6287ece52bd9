"""Lightning callbacks, one per file: checkpoints, throughput, dropout seeds, sample translations
and BLEU during training."""

from .bleu import BleuCallback
from .last_checkpoint import LastCheckpoint
from .model_summary import ModelSummary
from .sample_translations import SampleTranslations
from .step_seed import StepSeed
from .throughput import TokenThroughput

__all__ = [
    "BleuCallback",
    "LastCheckpoint",
    "ModelSummary",
    "SampleTranslations",
    "StepSeed",
    "TokenThroughput",
]
