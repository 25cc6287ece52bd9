"""Several models decoded as one: at every step, the mean of their log-probabilities.

Every search and :func:`~transformer_nmt.decoding.score_references` takes one model or a
sequence of them; :class:`Ensemble` is what they know of the models together (one target
vocabulary and pad id, the shortest ``max_len``, one device), and
:class:`~transformer_nmt.decoding.steps.EnsembleSteps` is its step function, so greedy and beam
search run on an ensemble unchanged. The combination is :func:`mean_log_probs`, log-linear with
equal weights: fairseq's ``EnsembleModel`` averages the probabilities instead
(log of the mean of p), which ranks differently where the models disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from transformer_nmt.model import Transformer


def mean_log_probs(log_probs: Sequence[Tensor]) -> Tensor:
    """The ensemble's log-probabilities: the mean over models of their log-softmax (one model's
    are returned as they are)."""
    if len(log_probs) == 1:
        return log_probs[0]
    return torch.stack(list(log_probs)).mean(dim=0)


@dataclass(frozen=True)
class Ensemble:
    """One or more models that share a target vocabulary and pad id (so, a tokenizer)."""

    models: tuple[Transformer, ...]

    @classmethod
    def of(cls, model: Transformer | Sequence[Transformer] | Ensemble) -> Ensemble:
        """``model`` alone, or the models of a sequence, checked to fit together."""
        if isinstance(model, Ensemble):
            return model
        models = (model,) if isinstance(model, Transformer) else tuple(model)
        if not models:
            raise ValueError("an ensemble needs at least one model")
        first = models[0].config
        for i, other in enumerate(models[1:], start=1):
            shared = ("tgt_vocab_size", "pad_id")
            differing = [f for f in shared if getattr(other.config, f) != getattr(first, f)]
            if differing:
                raise ValueError(
                    f"model {i} of the ensemble differs from model 0 in {differing}: ensemble "
                    f"only models trained with one tokenizer"
                )
            if next(other.parameters()).device != next(models[0].parameters()).device:
                raise ValueError(f"model {i} of the ensemble is on another device than model 0")
        return cls(models)

    @property
    def pad_id(self) -> int:
        return self.models[0].config.pad_id

    @property
    def tgt_vocab_size(self) -> int:
        return self.models[0].config.tgt_vocab_size

    @property
    def max_len(self) -> int:
        """The most positions every model takes: the shortest ``max_len``."""
        return min(model.config.max_len for model in self.models)

    @property
    def device(self) -> torch.device:
        return next(self.models[0].parameters()).device
