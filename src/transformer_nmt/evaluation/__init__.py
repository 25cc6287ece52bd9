"""Evaluation: sacreBLEU/chrF, checkpoints (load, average), batched text translation, and the
``BleuCallback`` that scores translations during training.
"""

from .callback import BleuCallback
from .checkpoint import (
    CheckpointError,
    LoadedCheckpoint,
    average_checkpoints,
    last_checkpoints,
    load_checkpoint,
    read_checkpoint,
)
from .metrics import CorpusScores, corpus_scores
from .translator import Translator

__all__ = [
    "BleuCallback",
    "CheckpointError",
    "CorpusScores",
    "LoadedCheckpoint",
    "Translator",
    "average_checkpoints",
    "corpus_scores",
    "last_checkpoints",
    "load_checkpoint",
    "read_checkpoint",
]
