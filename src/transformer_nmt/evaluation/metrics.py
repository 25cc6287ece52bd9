"""Corpus-level sacreBLEU and chrF over detokenised text, with their signatures."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from sacrebleu.metrics import BLEU, CHRF


@dataclass(frozen=True)
class CorpusScores:
    """sacreBLEU's BLEU (13a tokenisation, cased) and chrF of one system output."""

    bleu: float
    chrf: float
    bleu_signature: str  # e.g. nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0
    chrf_signature: str
    bleu_details: str  # e.g. BLEU = 34.12 65.1/40.2/27.3/18.9 (BP = 1.000 ratio = ...)
    chrf_details: str
    n_sentences: int
    brevity_penalty: float  # BLEU's BP: 1 when the output is at least as long as the references
    length_ratio: float  # output length / reference length, in 13a tokens

    @property
    def bleu_report(self) -> str:
        """``BLEU = … <signature>``, the line to print or paste into a paper."""
        return f"{self.bleu_details} {self.bleu_signature}"

    @property
    def chrf_report(self) -> str:
        return f"{self.chrf_details} {self.chrf_signature}"

    def to_dict(self) -> dict:
        return asdict(self)


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> CorpusScores:
    """Score detokenised, cased ``hypotheses`` against one reference each, with sacreBLEU."""
    if len(hypotheses) != len(references):
        raise ValueError(
            f"{len(hypotheses)} hypotheses but {len(references)} references; score one "
            f"hypothesis per reference, in the same order"
        )
    if not hypotheses:
        raise ValueError("no sentences to score: hypotheses and references are empty")
    hypotheses, references = list(hypotheses), [list(references)]
    bleu, chrf = BLEU(), CHRF()
    bleu_score = bleu.corpus_score(hypotheses, references)
    chrf_score = chrf.corpus_score(hypotheses, references)
    return CorpusScores(
        bleu=bleu_score.score,
        chrf=chrf_score.score,
        bleu_signature=str(bleu.get_signature()),
        chrf_signature=str(chrf.get_signature()),
        bleu_details=str(bleu_score),
        chrf_details=str(chrf_score),
        n_sentences=len(hypotheses),
        brevity_penalty=bleu_score.bp,
        length_ratio=bleu_score.ratio,
    )
