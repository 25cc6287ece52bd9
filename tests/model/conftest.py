"""Fixtures of the model tests: both norm placements, and tiny models in eval mode."""

import pytest

from tests.helpers.tiny_model import tiny_config
from transformer_nmt.model import Transformer


@pytest.fixture(params=["post", "pre"])
def norm(request) -> str:
    return request.param


@pytest.fixture
def make_model():
    """Build a tiny model in eval mode (dropout off) from config overrides."""

    def build(**overrides) -> Transformer:
        return Transformer(tiny_config(**overrides)).eval()

    return build
