"""Fixtures of the search tests: sources of the reverse task, padded."""

import pytest
import torch

from tests.helpers.reverse_task import PAD, half_trained_reverse_model, reverse_task_sources


@pytest.fixture
def sources() -> torch.Tensor:
    """Nine sentences of 2 to 9 tokens (so, padded), and one row of padding only."""
    src = reverse_task_sources(9, seed=5)
    return torch.cat([src, torch.full((1, src.size(1)), PAD)])


@pytest.fixture(scope="package")
def other_reverse_model():
    """The reverse model after fewer training steps: another model of the same vocabulary, for
    ensembles (shared: do not train it)."""
    return half_trained_reverse_model(steps=30)
