"""Processes sharing a cache: one builds an entry while the others wait on its lock, and a
killed builder's temporary directory does not outlive it. Real processes, hence slow."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.commands import script_environment

pytestmark = pytest.mark.slow

# Prepares the tiny corpus ($1) into the cache ($2) once the file $3 exists; the BPE training
# sleeps $4 seconds first, so a second process arrives while the first one is building.
BUILDER = """
import json, logging, sys, time
from pathlib import Path
from transformer_nmt.data import TranslationDataModule
from transformer_nmt.data import tokenizer as tokenizer_module

logging.basicConfig(level=logging.INFO)
trainings = []
train_bpe = tokenizer_module.train_bpe

def slow_train_bpe(*args, **kwargs):
    trainings.append(1)
    time.sleep(float(sys.argv[4]))
    return train_bpe(*args, **kwargs)

tokenizer_module.train_bpe = slow_train_bpe
dm = TranslationDataModule(
    source="text_files", data_dir=sys.argv[1], cache_dir=sys.argv[2], vocab_size=200,
    max_len=32, max_tokens=256,
)
print("ready", flush=True)
while not Path(sys.argv[3]).exists():
    time.sleep(0.01)
dm.prepare_data()
print(json.dumps({"trainings": len(trainings), "tokenizer_dir": dm.tokenizer_dir}), flush=True)
"""


def _start(tiny_dir: Path, cache_dir: Path, go: Path, sleep_s: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", BUILDER, str(tiny_dir), str(cache_dir), str(go), str(sleep_s)],
        env=script_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        encoding="utf-8",
    )


def _wait_ready(process: subprocess.Popen) -> None:
    line = process.stdout.readline()
    assert line.strip() == "ready", process.communicate()[1][-3000:]


def test_two_processes_build_the_same_cache_entries_once(tiny_dir, tmp_path):
    cache_dir, go = tmp_path / "cache", tmp_path / "go"
    processes = [_start(tiny_dir, cache_dir, go, sleep_s=3) for _ in range(2)]
    for process in processes:
        _wait_ready(process)
    go.touch()
    outputs = [process.communicate(timeout=180) for process in processes]
    assert [p.returncode for p in processes] == [0, 0], [err[-3000:] for _, err in outputs]
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    assert sum(r["trainings"] for r in results) == 1  # the BPE was trained once
    assert results[0]["tokenizer_dir"] == results[1]["tokenizer_dir"]
    logs = "".join(err for _, err in outputs)
    waiter = 0 if results[1]["trainings"] else 1
    assert (
        f"waiting for {os.uname().nodename} pid {processes[1 - waiter].pid}" in outputs[waiter][1]
    )
    assert logs.count("encoded ") == 3  # train, val and test, each once
    assert not list(cache_dir.glob("*/.tmp-*"))


def test_a_killed_builders_temporary_directory_is_removed_by_the_next_build(tiny_dir, tmp_path):
    cache_dir, go = tmp_path / "cache", tmp_path / "go"
    go.touch()
    killed = _start(tiny_dir, cache_dir, go, sleep_s=600)
    _wait_ready(killed)
    deadline = time.monotonic() + 60
    while not list(cache_dir.glob("tokenizers/.tmp-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    leftovers = list(cache_dir.glob("tokenizers/.tmp-*"))
    assert leftovers, "the builder never started building"
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    assert all(path.exists() for path in leftovers)
    survivor = _start(tiny_dir, cache_dir, go, sleep_s=0)
    out, err = survivor.communicate(timeout=180)
    assert survivor.returncode == 0, err[-3000:]
    assert json.loads(out.strip().splitlines()[-1])["trainings"] == 1
    assert not any(path.exists() for path in leftovers)
    assert "left by a build that was killed" in err
