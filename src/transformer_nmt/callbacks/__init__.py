"""Lightning callbacks, one per file: checkpoints, throughput, the training log, the progress
bar, dropout seeds, sample translations, attention maps and BLEU during training."""

from .attention_maps import AttentionMaps
from .bleu import BleuCallback
from .last_checkpoint import LastCheckpoint
from .model_summary import ModelSummary
from .progress_bar import ProgressBar
from .sample_translations import SampleTranslations
from .step_seed import StepSeed
from .throughput import TokenThroughput
from .training_log import TrainingLog

__all__ = [
    "AttentionMaps",
    "BleuCallback",
    "LastCheckpoint",
    "ModelSummary",
    "ProgressBar",
    "SampleTranslations",
    "StepSeed",
    "TokenThroughput",
    "TrainingLog",
]
