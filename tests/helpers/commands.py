"""The scripts at the repository root, run as a user runs them: in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from . import REPO_ROOT


def script_command(script: str, *args: str, python_options: tuple[str, ...] = ()) -> list[str]:
    """``python [python_options] <repository>/<script> *args``."""
    return [sys.executable, *python_options, str(REPO_ROOT / script), *args]


def script_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment with W&B offline and one OpenMP thread; ``env`` wins."""
    return {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1", **(env or {})}


def run_script(
    script: str,
    *args: str,
    cwd: Path | None = None,
    stdin: str | bytes | Path = "",
    env: dict[str, str] | None = None,
    timeout: float = 240,
    python_options: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` with ``args`` in ``cwd``; UTF-8 text out. ``stdin`` is text or bytes piped
    in, or a file given as stdin (a shell's ``< file``)."""
    command = script_command(script, *args, python_options=python_options)
    options = dict(cwd=cwd, env=script_environment(env), capture_output=True, timeout=timeout)
    if isinstance(stdin, Path):
        with open(stdin, "rb") as handle:
            result = subprocess.run(command, stdin=handle, **options)
    else:
        data = stdin.encode("utf-8") if isinstance(stdin, str) else stdin
        result = subprocess.run(command, input=data, **options)
    result.stdout, result.stderr = result.stdout.decode("utf-8"), result.stderr.decode("utf-8")
    return result


def run_train(args: list[str], cwd: Path, timeout: float = 240, env: dict | None = None):
    """Run ``python train.py args`` in ``cwd``; fail the test with its output if it fails."""
    result = run_script("train.py", *args, cwd=cwd, env=env, timeout=timeout)
    if result.returncode != 0:
        pytest.fail(
            f"train.py {' '.join(args)} failed:\n{result.stdout[-4000:]}\n{result.stderr[-6000:]}"
        )
    return result


def start_train_until(
    args: list[str], cwd: Path, path: Path, stdout=subprocess.DEVNULL, timeout: float = 180
) -> subprocess.Popen:
    """Start ``python train.py args`` in ``cwd`` and return it, running, once ``path`` exists
    (or the process ended, or ``timeout`` seconds passed: the caller checks which)."""
    process = subprocess.Popen(
        script_command("train.py", *args),
        cwd=cwd,
        env=script_environment(),
        stdout=stdout,
        stderr=subprocess.STDOUT if stdout is subprocess.PIPE else subprocess.DEVNULL,
    )
    deadline = time.monotonic() + timeout
    try:
        while not path.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    except BaseException:
        process.kill()
        raise
    return process
