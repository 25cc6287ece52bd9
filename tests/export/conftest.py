"""Fixtures of the export tests alone: the toy checkpoints exported to Hugging Face."""

from tests.helpers.slow import slow_fixture
from transformer_nmt.export import export_huggingface


@slow_fixture(scope="session")
def hf_dirs(toys, tmp_path_factory) -> dict:
    """Each toy checkpoint exported to Hugging Face: post-norm → Marian, pre-norm → Pegasus."""
    root = tmp_path_factory.mktemp("hf")
    return {norm: export_huggingface(toy.checkpoint, root / norm) for norm, toy in toys.items()}
