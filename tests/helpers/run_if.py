"""``@run_if(...)``: skip a test, saying what is missing, unless the machine has what it needs.

    @run_if(min_gpus=1)                 # a CUDA GPU
    @run_if(package="ctranslate2")      # an optional dependency (pyproject's extras)
    @run_if(linux=True)                 # /proc and glibc
    @run_if(multi30k=True)              # the real Multi30k corpus in MULTI30K_DIR
    @run_if(slurm=True)                 # a SLURM cluster that answers `sinfo` (.ci/start-slurm)
    @run_if(chromium=True)              # a headless browser: chromium, chromedriver, selenium

It is ``pytest.mark.skipif``, so it also marks a whole module: ``pytestmark = run_if(...)``.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

MULTI30K_FILES = "{train,val,test_2016_flickr}.{en,de}.gz"


def multi30k_location() -> Path | None:
    """The directory MULTI30K_DIR names, or None when it is unset or not a directory."""
    location = os.environ.get("MULTI30K_DIR")
    return Path(location) if location and Path(location).is_dir() else None


def _missing_multi30k() -> str:
    location = os.environ.get("MULTI30K_DIR")
    found = f" ({location!r} is not a directory)" if location else ""
    return f"set MULTI30K_DIR to a directory holding Multi30k's {MULTI30K_FILES}{found}"


@functools.cache
def _missing_slurm() -> str | None:
    """Why no SLURM cluster takes jobs here (no ``sinfo``, or no responding node), or None."""
    if shutil.which("sinfo") is None:
        return "needs a SLURM cluster: sinfo is not installed (apt-get install slurm-wlm munge)"
    try:
        answer = subprocess.run(
            ["sinfo", "--noheader", "--responding", "--format=%P"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except subprocess.TimeoutExpired:
        return "needs a SLURM cluster: sinfo got no answer in 20 s (.ci/start-slurm starts one)"
    if answer.returncode != 0 or not answer.stdout.strip():
        said = (answer.stderr.strip().splitlines() or ["no responding node"])[-1]
        return f"needs a SLURM cluster: sinfo says {said!r} (.ci/start-slurm starts one)"
    return None


def chromium_location() -> tuple[str, str] | None:
    """(chromium, chromedriver) as found on PATH, or None unless both are there."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def _missing_chromium() -> str:
    missing = []
    if chromium_location() is None:
        missing.append(
            "chromium and chromedriver on PATH (apt-get install chromium chromium-driver)"
        )
    if importlib.util.find_spec("selenium") is None:
        missing.append("the package selenium (pip install -e '.[dev]')")
    return "needs " + " and ".join(missing) if missing else ""


def run_if(
    *,
    min_gpus: int = 0,
    package: str | None = None,
    linux: bool = False,
    multi30k: bool = False,
    slurm: bool = False,
    chromium: bool = False,
) -> pytest.MarkDecorator:
    """A ``skipif`` mark whose reason names every requirement this machine lacks."""
    missing = []
    if min_gpus and torch.cuda.device_count() < min_gpus:
        missing.append(f"needs {min_gpus} CUDA GPU(s), PyTorch sees {torch.cuda.device_count()}")
    if package and importlib.util.find_spec(package) is None:
        missing.append(f"needs the optional package {package} (pip install -e '.[dev]')")
    if linux and not sys.platform.startswith("linux"):
        missing.append("needs Linux (/proc, glibc)")
    if multi30k and multi30k_location() is None:
        missing.append(_missing_multi30k())
    if slurm and _missing_slurm() is not None:
        missing.append(_missing_slurm())
    if chromium and _missing_chromium():
        missing.append(_missing_chromium())
    return pytest.mark.skipif(bool(missing), reason="; ".join(missing))
