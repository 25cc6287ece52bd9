"""corpus_scores: sacreBLEU's corpus BLEU and chrF, with their signatures."""

import pytest
import sacrebleu

from transformer_nmt.evaluation import corpus_scores

HYPOTHESES = ["The cat sat on the mat.", "A dog runs in the park.", "Hello world"]
REFERENCES = ["The cat sat on a mat.", "A dog is running in the park.", "Hello, world!"]


def test_scores_are_sacrebleus_corpus_bleu_and_chrf():
    scores = corpus_scores(HYPOTHESES, REFERENCES)
    assert scores.bleu == pytest.approx(sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES]).score)
    assert scores.chrf == pytest.approx(sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES]).score)
    assert 0 < scores.bleu < 100 and 0 < scores.chrf < 100
    assert scores.n_sentences == 3


def test_identical_output_scores_100_and_case_matters():
    assert corpus_scores(REFERENCES, REFERENCES).bleu == pytest.approx(100)
    lowercased = corpus_scores([r.lower() for r in REFERENCES], REFERENCES)
    assert lowercased.bleu < 100  # cased BLEU, as the paper reports


def test_reports_carry_the_signatures():
    scores = corpus_scores(HYPOTHESES, REFERENCES)
    assert "tok:13a" in scores.bleu_signature and "case:mixed" in scores.bleu_signature
    assert f"version:{sacrebleu.__version__}" in scores.bleu_signature
    assert scores.bleu_report.startswith("BLEU = ")
    assert scores.bleu_report.endswith(scores.bleu_signature)
    assert scores.chrf_report.startswith("chrF2 = ")
    assert scores.chrf_report.endswith(scores.chrf_signature)


def test_mismatched_or_empty_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="3 hypotheses but 2 references"):
        corpus_scores(HYPOTHESES, REFERENCES[:2])
    with pytest.raises(ValueError, match="no sentences to score"):
        corpus_scores([], [])
