"""Evaluation: sacreBLEU/chrF, batched text translation, and the final scoring of a run."""

from .metrics import CorpusScores, corpus_scores
from .translator import Translator

__all__ = ["CorpusScores", "Translator", "corpus_scores"]
