import pytest

from transformer_nmt.model import Transformer

from .tiny_model import tiny_config


@pytest.fixture(params=["post", "pre"])
def norm(request) -> str:
    return request.param


@pytest.fixture
def make_model():
    """Build a tiny model in eval mode (dropout off) from config overrides."""

    def build(**overrides) -> Transformer:
        return Transformer(tiny_config(**overrides)).eval()

    return build
