"""Fixtures of the evaluation tests alone."""

from pathlib import Path

import pytest

from tests.helpers.tiny_checkpoint import write_other_tokenizer
from transformer_nmt.data import load_tokenizer, tokenizer_identity


@pytest.fixture(scope="session")
def other_tokenizer_dir(tmp_path_factory, workspace) -> Path:
    """A BPE of the workspace tokenizer's size, trained on other text: other ids, same size."""
    directory = write_other_tokenizer(tmp_path_factory.mktemp("other") / "tokenizer")
    other = load_tokenizer(str(directory))
    assert len(other) == len(workspace.tokenizer)
    assert tokenizer_identity(other) != tokenizer_identity(workspace.tokenizer)
    return directory
