"""Evaluation: sacreBLEU/chrF, translating a split and scoring it, text-in text-out translation,
and the final scoring of a training run."""

from typing import Any

from .final_eval import FinalEvalConfig
from .metrics import CorpusScores, corpus_scores

__all__ = ["CorpusScores", "FinalEvalConfig", "Translator", "corpus_scores"]


def __getattr__(name: str) -> Any:
    # The translator reads checkpoints, which imports Lightning (seconds): only when asked for,
    # so that reading the config schemas (`python train.py --cfg job`) stays fast.
    if name == "Translator":
        from .translator import Translator

        return Translator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
