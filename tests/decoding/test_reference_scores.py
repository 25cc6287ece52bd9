"""Forced decoding: the log-probability of given references, as training and the searches see it."""

import pytest
import torch

from tests.helpers.reverse_task import BOS, EOS, PAD, reverse_task_batch
from transformer_nmt.decoding import beam_search, score_references, score_token_ids
from transformer_nmt.training.loss import label_smoothed_loss


def without_padding(batch: torch.Tensor) -> list[list[int]]:
    return [[t for t in row if t != PAD] for row in batch.tolist()]


def test_reference_scores_are_the_training_losss_token_nll(reverse_model):
    src, tgt_in, labels = reverse_task_batch(12, torch.Generator().manual_seed(3))
    references = [ids[:-1] for ids in without_padding(labels)]  # the EOS is the scorer's
    scores = score_token_ids(reverse_model, without_padding(src), references, BOS, EOS, 5)
    logits = reverse_model(src, tgt_in)
    for row, token_log_probs in enumerate(scores):
        assert len(token_log_probs) == len(references[row]) + 1
        losses = label_smoothed_loss(logits[row : row + 1], labels[row : row + 1], PAD, 0.0)
        assert -sum(token_log_probs) == pytest.approx(losses.nll_sum.item(), abs=1e-4)
    # per token: the batch's mean NLL, which training logs as train/nll
    _, nll = label_smoothed_loss(logits, labels, PAD, 0.0).means()
    tokens = [log_prob for row in scores for log_prob in row]
    assert -sum(tokens) / len(tokens) == pytest.approx(nll.item(), abs=1e-5)
    # ... and each token's NLL on its own
    per_token = torch.nn.functional.cross_entropy(
        logits.transpose(1, 2), labels, ignore_index=PAD, reduction="none"
    )
    torch.testing.assert_close(
        -score_references(reverse_model, src, labels, BOS),
        per_token.masked_fill(labels == PAD, 0.0),
        atol=1e-5,
        rtol=0,
    )


def test_a_hypothesis_scores_its_own_token_log_probs(reverse_model, sources):
    found = beam_search(reverse_model, sources, BOS, EOS, beam_size=3, nbest=3, max_len_b=5)
    checked = 0
    for row, hypotheses in enumerate(found[:-1]):  # the last source is all padding
        source = [t for t in sources[row].tolist() if t != PAD]
        for h in hypotheses:
            ended_by_eos = len(h.token_log_probs) == len(h.tokens) + 1
            if not ended_by_eos:
                continue  # a forced decoding always ends with EOS
            (scores,) = score_token_ids(reverse_model, [source], [h.tokens], BOS, EOS)
            torch.testing.assert_close(scores, h.token_log_probs, atol=1e-5, rtol=0)
            checked += 1
    assert checked > 10


def test_an_ensembles_reference_scores_are_its_models_mean(reverse_model, other_reverse_model):
    src, _, labels = reverse_task_batch(6, torch.Generator().manual_seed(4))
    each = [score_references(m, src, labels, BOS) for m in (reverse_model, other_reverse_model)]
    together = score_references([reverse_model, other_reverse_model], src, labels, BOS)
    torch.testing.assert_close(together, (each[0] + each[1]) / 2, atol=1e-6, rtol=0)
    assert not torch.allclose(each[0], each[1])


def test_references_longer_than_the_model_are_refused(reverse_model):
    too_long = [[3] * reverse_model.config.max_len]  # its EOS would not fit
    with pytest.raises(
        ValueError, match=r"1 reference\(s\) are longer than the model's max_len=64 tokens"
    ):
        score_token_ids(reverse_model, [[3, EOS]], too_long, BOS, EOS)
