"""keep_freed_host_memory: freed big tensors stay in the process instead of going back to the OS."""

import subprocess
import sys

import pytest

from tests.helpers.run_if import run_if

# Resident size (MiB) after allocating, touching and freeing a 256 MiB tensor, minus before.
PROBE = """
import sys, torch
from transformer_nmt.host_memory import keep_freed_memory
def rss():
    with open("/proc/self/status") as status:
        return next(int(l.split()[1]) for l in status if l.startswith("VmRSS")) / 1024
tuned = keep_freed_memory() if sys.argv[1] == "tuned" else None
before = rss()
x = torch.ones(64 * 2**20)  # 256 MiB, written
del x
print(tuned, rss() - before)
"""


def _kept_mib(mode: str) -> tuple[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0], float(out[1])


@pytest.mark.slow  # starts two Python processes that import torch
@run_if(linux=True)
def test_freed_memory_is_kept_only_when_tuned():
    tuned, kept_tuned = _kept_mib("tuned")
    _, kept_default = _kept_mib("default")
    assert tuned == "True", "mallopt did not take effect on this glibc"
    assert kept_default < 64, f"glibc kept {kept_default:.0f} MiB without tuning"
    assert kept_tuned > 192, f"only {kept_tuned:.0f} MiB of the freed 256 MiB stayed in the heap"
