"""Evaluation: sacreBLEU/chrF, translating a split and scoring it, text-in text-out translation
(with our search, or with a CTranslate2 export), and the final scoring of a training run."""

from typing import Any

from .final_eval import FinalEvalConfig
from .metrics import CorpusScores, corpus_scores

__all__ = [
    "CTranslate2Translator",
    "CorpusScores",
    "FinalEvalConfig",
    "TextTranslator",
    "Translator",
    "corpus_scores",
]


def __getattr__(name: str) -> Any:
    # The translator reads checkpoints, which imports Lightning (seconds): only when asked for,
    # so that reading the config schemas (`python train.py --cfg job`) stays fast.
    if name in ("TextTranslator", "Translator"):
        from . import translator

        return getattr(translator, name)
    if name == "CTranslate2Translator":
        from .ctranslate2_translator import CTranslate2Translator

        return CTranslate2Translator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
