"""Settings of the training tests: one torch thread while they run."""

import pytest
import torch


@pytest.fixture(autouse=True, scope="package")
def _one_torch_thread():
    """Tiny models run 20x slower with 2 OpenMP threads on a busy 2-core CI machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
