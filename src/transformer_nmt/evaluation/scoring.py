"""Translate a split of a data module and score it against its references (sacreBLEU, chrF)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from transformer_nmt.decoding import SearchOptions, translate_token_ids
from transformer_nmt.model import Transformer

from .metrics import CorpusScores, corpus_scores

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScoredSplit:
    """The translations of one split, their scores, and how long decoding took."""

    split: str
    hypotheses: list[str]
    scores: CorpusScores
    decode_seconds: float


def translate_and_score(
    model: Transformer,
    datamodule,
    split: str,
    options: SearchOptions,
    max_sentences: int | None = None,
) -> ScoredSplit:
    """Decode the first ``max_sentences`` (or all) source sentences of ``split`` with ``model``
    and score the detokenised outputs against the raw references.

    ``datamodule`` gives ``raw_pairs(split)``, ``encode_source(texts)`` (ids + EOS, truncated like
    the training sources), ``decode(ids)``, ``bos_id``, ``eos_id`` and ``pad_id``, which must be
    the model's ``config.pad_id``.
    """
    if datamodule.pad_id != model.config.pad_id:
        raise ValueError(
            f"the data module's pad id {datamodule.pad_id} differs from the model's "
            f"config.pad_id {model.config.pad_id}; build the model from the data module's "
            f"tokenizer"
        )
    pairs = datamodule.raw_pairs(split)[:max_sentences]
    sources = datamodule.encode_source([src for src, _ in pairs])
    started = time.perf_counter()
    outputs = translate_token_ids(model, sources, datamodule.bos_id, datamodule.eos_id, options)
    seconds = time.perf_counter() - started
    hypotheses = [datamodule.decode(ids) for ids in outputs]
    scores = corpus_scores(hypotheses, [tgt for _, tgt in pairs])
    log.info(
        "decoded %s (%d sentences in %.1fs): %s | %s",
        split,
        len(pairs),
        seconds,
        scores.bleu_report,
        scores.chrf_report,
    )
    return ScoredSplit(split, hypotheses, scores, seconds)
