import pytest
import torch

from ..reverse_task import PAD, reverse_task_batch
from .reverse_model import half_trained_reverse_model


@pytest.fixture(scope="session")
def model():
    return half_trained_reverse_model()


@pytest.fixture
def sources() -> torch.Tensor:
    """Nine sentences of 2 to 9 tokens (so, padded), and one row of padding only."""
    src, _, _ = reverse_task_batch(9, torch.Generator().manual_seed(5))
    return torch.cat([src, torch.full((1, src.size(1)), PAD)])


def unpadded(src: torch.Tensor, row: int) -> torch.Tensor:
    """Row ``row`` of src alone, without its padding: [1, its length]."""
    return src[row : row + 1, : max(int((src[row] != PAD).sum()), 1)]
