"""The data pipeline at WMT size: seconds to the first step, and the memory of the whole process
tree (DDP ranks and DataLoader workers), as the corpus grows.

    python benchmarks/bench_data_pipeline.py [--sizes 200k,4.5M] [--num-workers 2] [--quick]

For each size N it writes (once, kept in ``--work-dir``) a synthetic corpus in the WMT16 schema
(jsonl rows ``{"translation": {"de": …, "en": …}}``; made-up words with Zipf frequencies,
log-normal lengths of ~20 words) and runs ``train.py data=wmt16_files model=tiny trainer=cpu``
(37,000 BPE types, ``--steps`` steps, no validation) three times: **cold** (empty cache: it
trains the BPE and encodes every split first), **warm** (the same again, from the cache) and
**2 ranks** (warm, ``trainer.devices=2`` over gloo). Memory is PSS summed over the process tree
(``psutil``), sampled every 0.2 s: the peak before the first step (preparation), the peak while
training, each DataLoader worker's peak, and the second rank with its workers as read by that
rank at its own first batch (before any step tensor exists).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil
from lightning.pytorch.callbacks import Callback

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import print_table, tree_pss_bytes  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30


def write_corpus(directory: Path, pairs: int, seed: int = 0) -> None:
    """train/validation/test jsonl (3000 pairs each for the last two) in the WMT16 schema:
    100,000 made-up words a language with Zipf frequencies, ~20 words a sentence."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = {
        lang: np.array(["".join(rng.choice(letters, n)) for n in rng.integers(3, 11, 100_000)])
        for lang in ("de", "en")
    }
    zipf = 1.0 / np.arange(1, 100_001)
    zipf /= zipf.sum()
    directory.mkdir(parents=True, exist_ok=True)
    for split, total in (("train", pairs), ("validation", 3000), ("test", 3000)):
        part = directory / f".{split}.jsonl.part"
        with open(part, "w", encoding="utf-8") as out:
            for start in range(0, total, 100_000):
                lengths = np.clip(
                    np.rint(np.exp(rng.normal(2.9, 0.5, min(100_000, total - start)))), 1, 150
                ).astype(int)
                ends = np.cumsum(lengths)
                side = {}
                for lang in ("de", "en"):
                    drawn = words[lang][rng.choice(100_000, size=int(ends[-1]), p=zipf)]
                    side[lang] = [
                        " ".join(drawn[e - k : e]) for e, k in zip(ends, lengths, strict=True)
                    ]
                out.writelines(
                    json.dumps({"translation": {"de": de, "en": en}}) + "\n"
                    for de, en in zip(side["de"], side["en"], strict=True)
                )
        part.replace(directory / f"{split}.jsonl")  # atomic: a corpus is complete or absent


class FirstBatch(Callback):
    """Added to train.py on the command line: each rank writes to ``path.<rank>`` the time its
    first training batch starts and the PSS of its process and its workers at that moment."""

    def __init__(self, path: str) -> None:
        self.path, self.done = path, False

    def on_train_batch_start(self, trainer, *args) -> None:
        if not self.done:
            self.done = True
            reading = [time.time(), tree_pss_bytes()]
            Path(f"{self.path}.{trainer.global_rank}").write_text(json.dumps(reading))


class TreeSampler(threading.Thread):
    """Every 0.2 s, the PSS of each process of the tree under ``root``, and whether it is a
    forked worker (a child with its parent's command line): ``samples`` of (time, {pid: (bytes,
    worker)})."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root, self.samples, self.stopped = psutil.Process(root), [], threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.2):
            reading = {}
            try:
                processes = [self.root, *self.root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            for process in processes:
                try:
                    worker = process.parent().cmdline() == process.cmdline()
                    reading[process.pid] = (process.memory_full_info().pss, worker)
                except (psutil.NoSuchProcess, psutil.AccessDenied, AttributeError):
                    continue
            self.samples.append((time.time(), reading))

    def peak(self, since=0.0, until=float("inf"), workers_only=False) -> float:
        """GiB: the largest tree total (or, ``workers_only``, the largest worker) in the span."""
        values = [
            max((b for b, w in r.values() if w), default=0)
            if workers_only
            else sum(b for b, _ in r.values())
            for t, r in self.samples
            if since <= t <= until
        ]
        return max(values, default=0) / GIB


def run_train(corpus: Path, cache: Path, run_dir: Path, args, devices: int) -> dict:
    """One train.py process; seconds to its first step and the tree's memory."""
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    clock = run_dir / "first_batch"
    overrides = [
        "data=wmt16_files",
        *(f"data.data_files.{s}={corpus / s}.jsonl" for s in ("train", "validation", "test")),
        f"data.cache_dir={cache}",
        f"data.num_workers={args.num_workers}",
        "model=tiny",
        "trainer=cpu",
        f"trainer.devices={devices}",
        f"trainer.max_steps={args.steps}",
        "trainer.limit_val_batches=0",
        "trainer.num_sanity_val_steps=0",
        "trainer.enable_progress_bar=false",
        "logger=none",
        "final_eval.splits=[]",
        "optimized_metric=null",
        f"hydra.run.dir={run_dir}",
        "+callbacks.first_batch._target_=bench_data_pipeline.FirstBatch",
        f"+callbacks.first_batch.path={clock}",
    ]
    path = os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])
    env = {
        **os.environ,
        "PYTHONPATH": path,
        "OMP_NUM_THREADS": "1",
        "HF_DATASETS_CACHE": str(cache / "hf"),
    }
    started = time.time()
    with open(run_dir / "output.log", "w") as log:
        process = subprocess.Popen(
            [sys.executable, str(REPO_ROOT / "train.py"), *overrides],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO_ROOT,
        )
        sampler = TreeSampler(process.pid)
        sampler.start()
        returncode = process.wait()
        sampler.stopped.set()
        sampler.join()
    if returncode != 0 or not Path(f"{clock}.0").is_file():
        raise SystemExit(f"train.py failed; see {run_dir / 'output.log'}")
    first_batch, _ = json.loads(Path(f"{clock}.0").read_text())
    second = Path(f"{clock}.1")
    return {
        "to_first_step_s": first_batch - started,
        "preparation_gib": sampler.peak(until=first_batch),
        "training_gib": sampler.peak(since=first_batch),
        "worker_gib": sampler.peak(workers_only=True),
        "second_rank_gib": json.loads(second.read_text())[1] / GIB if second.is_file() else None,
    }


def parse_size(text: str) -> int:
    """``4.5M`` -> 4500000, ``200k`` -> 200000."""
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1].lower(), 1)
    return int(float(text.rstrip("kKmM")) * scale)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="200k", help="training pairs, comma-separated (200k)")
    parser.add_argument("--num-workers", type=int, default=2, help="DataLoader workers per rank")
    parser.add_argument("--steps", type=int, default=10, help="optimizer steps per run")
    parser.add_argument(
        "--work-dir", default=str(Path(tempfile.gettempdir()) / "bench_data_pipeline")
    )
    parser.add_argument("--quick", action="store_true", help="20k pairs, 3 steps")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.steps = "20k", 3
    rows = []
    for pairs in map(parse_size, args.sizes.split(",")):
        corpus, cache = (
            Path(args.work_dir) / f"corpus-{pairs}",
            Path(args.work_dir) / f"cache-{pairs}",
        )
        if not (corpus / "test.jsonl").is_file():
            write_corpus(corpus, pairs)
        shutil.rmtree(cache, ignore_errors=True)
        runs = {}
        for name, devices in (("cold", 1), ("warm", 1), ("2 ranks", 2)):
            runs[name] = run_train(corpus, cache, Path(args.work_dir) / "run", args, devices)
            print(f"  {pairs} {name}: {runs[name]}", file=sys.stderr)
        shutil.rmtree(cache, ignore_errors=True)
        cold, warm, ddp = runs.values()
        worker = max(warm["worker_gib"], ddp["worker_gib"])
        rows.append(
            [
                f"{pairs:,}",
                f"{cold['to_first_step_s']:.1f}",
                f"{cold['preparation_gib']:.2f}",
                f"{warm['to_first_step_s']:.1f}",
                f"{warm['training_gib']:.2f}",
                f"{worker:.2f}",
                f"{ddp['training_gib']:.2f}",
                f"{ddp['second_rank_gib']:.2f}",
            ]
        )
    print_table(
        f"train.py model=tiny, 37,000 BPE types, {args.num_workers} workers a rank, "
        f"{args.steps} steps",
        [
            "N pairs",
            "cold → 1st step s",
            "preparation peak GiB",
            "warm → 1st step s",
            "warm peak GiB",
            "worker peak GiB",
            "2 ranks: peak GiB",
            "2nd rank + its workers at its 1st batch GiB",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
