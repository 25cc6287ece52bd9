"""The data pipeline at the paper's corpus size: preparation time and memory, and training memory,
as the number of sentence pairs N grows.

    python benchmarks/bench_data_pipeline.py [--sizes 0.5M,1M,2M,4.5M] [--vocab-size 37000]
        [--max-tokens 4096] [--num-workers 2] [--steps 20] [--no-ddp] [--work-dir DIR]
        [--multi30k-dir DIR] [--json out.json]

For each N it writes (once; kept in ``--work-dir`` for later runs) a synthetic WMT16-schema
corpus, jsonl rows ``{"translation": {"de": …, "en": …}}``: words drawn from Multi30k's own word
frequencies (``--multi30k-dir``, default ``$MULTI30K_DIR``), log-normal lengths of about 24 words
a side, N training pairs and 3000 validation and test pairs. Then it runs ``train.py``
(``data=wmt16_files model=tiny trainer=cpu logger=none``, ``--steps`` optimizer steps, no
validation) three times, each as a child process whose memory is sampled every 0.2 s as the PSS
summed over the process and all its descendants (``process_memory.py``):

* cold: empty caches (ours and the ``datasets`` one), so the run converts the jsonl files to
  arrow, trains the joint BPE (``--vocab-size`` types) and encodes every split into the
  memory-mapped cache before its first step. The BPE and encoding
  times come from the data module's log lines; "prep GiB" is the peak before the first step.
* warm: the same command again, reading the cache: seconds to the first optimizer step, and the
  peak while training.
* ddp: warm, on 2 CPU ranks (``trainer.devices=2``, gloo), ``--num-workers`` DataLoader workers
  per rank; the peak of the tree and of each process. What the second rank adds beyond its
  step's own tensors is its PSS and its workers' as its own first step starts, before any step
  tensor exists, read by the rank itself at that moment (a sample taken from outside every
  0.2 s can fall while the rank still sorts its epoch; differences of peaks are unreliable too:
  the heap keeps whichever step was largest, so one process's peak varies by gigabytes from run
  to run).

``--report results.json`` prints the tables of an earlier ``--json`` file without running.

The synthetic corpus has Multi30k's ~40k distinct words where WMT16 has millions, so the BPE's
merge phase is cheaper here than on the real data; everything else scales with N alone.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from lightning.pytorch.callbacks import Callback

sys.path.insert(0, str(Path(__file__).resolve().parent))

from process_memory import TreeMemorySampler, process_tree, pss_kib  # noqa: E402
from timing import DEFAULT_MULTI30K, REPO_ROOT, load_average, print_header, script_parser  # noqa: E402

EVAL_PAIRS = 3000
MEAN_WORDS = 24
LENGTH_SIGMA = 0.5  # of log(words per sentence)
MAX_WORDS = 150
CHUNK_PAIRS = 100_000
FIRST_STEP_FILE = "first_step.txt"


class FirstStepClock(Callback):
    """Writes to ``path`` (rank 0) the wall-clock times at which the first training batch
    starts (the data is ready) and at which the first optimizer step ends, one per line; every
    other rank writes the time its own first batch starts to ``path.rank<r>``, and the PSS (KiB)
    of its process and its DataLoader workers read at that moment, when the sampler's epoch is
    built and no step tensor exists yet."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.times: list[float] = []

    def on_train_batch_start(self, trainer, *args, **kwargs) -> None:
        if self.times:
            return
        self.times.append(time.time())
        if trainer.global_rank != 0:
            tree_kib = sum((pss_kib(pid) or (0, 0))[0] for pid in process_tree(os.getpid()))
            Path(f"{self.path}.rank{trainer.global_rank}").write_text(
                f"{self.times[0]}\n{tree_kib}\n"
            )

    def on_train_batch_end(self, trainer, *args, **kwargs) -> None:
        if len(self.times) == 1 and trainer.global_rank == 0:
            self.times.append(time.time())
            Path(self.path).write_text("".join(f"{t}\n" for t in self.times))


def parse_size(text: str) -> int:
    """``0.5M`` -> 500000, ``200k`` -> 200000, ``1000`` -> 1000."""
    match = re.fullmatch(r"([\d.]+)([kKmM]?)", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 0.5M, 200k, 1000)")
    scale = {"": 1, "k": 1_000, "m": 1_000_000}[match.group(2).lower()]
    return int(float(match.group(1)) * scale)


def word_frequencies(multi30k_dir: Path, lang: str) -> tuple[np.ndarray, np.ndarray]:
    """(words, probabilities) of Multi30k's training side ``lang``, split on whitespace."""
    with gzip.open(multi30k_dir / f"train.{lang}.gz", "rt", encoding="utf-8") as handle:
        counts = Counter(word for line in handle for word in line.split())
    words, freq = zip(*counts.most_common(), strict=True)
    probabilities = np.asarray(freq, dtype=np.float64)
    return np.asarray(words, dtype=object), probabilities / probabilities.sum()


def write_synthetic_corpus(directory: Path, n_pairs: int, multi30k_dir: Path, seed: int) -> None:
    """train/validation/test jsonl in the WMT16 schema (see the module docstring)."""
    rng = np.random.default_rng(seed)
    vocab = {lang: word_frequencies(multi30k_dir, lang) for lang in ("en", "de")}
    mu = np.log(MEAN_WORDS) - LENGTH_SIGMA**2 / 2
    directory.mkdir(parents=True, exist_ok=True)
    for split, total in (("train", n_pairs), ("validation", EVAL_PAIRS), ("test", EVAL_PAIRS)):
        tmp = directory / f".{split}.jsonl.tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            for start in range(0, total, CHUNK_PAIRS):
                n = min(CHUNK_PAIRS, total - start)
                base = rng.lognormal(mu, LENGTH_SIGMA, n)
                lengths = {
                    "en": np.clip(np.rint(base), 1, MAX_WORDS).astype(np.int64),
                    "de": np.clip(np.rint(base * rng.lognormal(0, 0.1, n)), 1, MAX_WORDS).astype(
                        np.int64
                    ),
                }
                sides = {}
                for lang, (words, probabilities) in vocab.items():
                    ends = np.cumsum(lengths[lang])
                    tokens = words[rng.choice(len(words), size=int(ends[-1]), p=probabilities)]
                    starts = ends - lengths[lang]
                    sides[lang] = [" ".join(tokens[a:b]) for a, b in zip(starts, ends, strict=True)]
                handle.writelines(
                    json.dumps({"translation": {"de": de, "en": en}}, ensure_ascii=False) + "\n"
                    for en, de in zip(sides["en"], sides["de"], strict=True)
                )
        tmp.rename(directory / f"{split}.jsonl")


def corpus(work_dir: Path, n_pairs: int, multi30k_dir: Path, seed: int) -> Path:
    directory = work_dir / f"corpus-{n_pairs}-seed{seed}"
    if not (directory / "test.jsonl").is_file():
        started = time.perf_counter()
        write_synthetic_corpus(directory, n_pairs, multi30k_dir, seed)
        print(
            f"# wrote {directory} ({n_pairs} pairs) in {time.perf_counter() - started:.0f} s",
            file=sys.stderr,
        )
    return directory


@dataclass
class Run:
    """One ``train.py`` child process: what it reported and how much memory its tree held."""

    name: str
    seconds_to_first_step: float | None = None
    bpe_s: float | None = None
    encode_s: float | None = None
    write_s: float | None = None
    peak_before_step_gib: float = 0.0
    peak_training_gib: float = 0.0
    peak_by_role_gib: dict[str, float] = field(default_factory=dict)
    peak_anon_by_role_gib: dict[str, float] = field(default_factory=dict)  # Pss_Anon alone
    ready_by_role_gib: dict[str, float] = field(default_factory=dict)  # as the first step starts
    # a rank other than 0 with its workers, read by the rank itself as its first step starts
    tree_at_start_gib: dict[str, float] = field(default_factory=dict)
    returncode: int = 0


def run_train(
    name: str, corpus_dir: Path, cache_dir: Path, run_dir: Path, args, devices: int = 1
) -> Run:
    run_dir.mkdir(parents=True, exist_ok=True)
    clock = run_dir / FIRST_STEP_FILE
    for stale in run_dir.glob(FIRST_STEP_FILE + "*"):
        stale.unlink()
    overrides = [
        "data=wmt16_files",
        *(f"data.data_files.{s}={corpus_dir / s}.jsonl" for s in ("train", "validation", "test")),
        f"data.vocab_size={args.vocab_size}",
        f"data.max_tokens={args.max_tokens}",
        f"data.num_workers={args.num_workers}",
        f"data.cache_dir={cache_dir}",
        "model=tiny",
        "trainer=cpu",
        f"trainer.devices={devices}",
        f"trainer.max_steps={args.steps}",
        "trainer.limit_val_batches=0",
        "trainer.num_sanity_val_steps=0",
        "trainer.enable_progress_bar=false",
        "trainer.enable_model_summary=false",
        "logger=none",
        "final_eval.splits=[]",
        "optimized_metric=null",  # no final evaluation at all
        "callbacks.sample_translations=null",
        "callbacks.best_checkpoint=null",
        f"+callbacks.first_step._target_={Path(__file__).stem}.FirstStepClock",
        f"+callbacks.first_step.path={clock}",
        f"hydra.run.dir={run_dir}",
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(Path(__file__).resolve().parent), env.get("PYTHONPATH")) if p
    )
    env.setdefault("OMP_NUM_THREADS", "1")
    env["HF_DATASETS_CACHE"] = str(cache_dir / "datasets")  # cold: jsonl -> arrow included
    log_path = run_dir / "output.log"
    started_wall = time.time()
    with open(log_path, "w") as log_file:
        process = subprocess.Popen(
            [sys.executable, str(REPO_ROOT / "train.py"), *overrides],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO_ROOT,
        )
        sampler = TreeMemorySampler(process.pid).start()
        returncode = process.wait()
        sampler.stop()
    log_text = log_path.read_text(errors="replace")
    result = Run(name, returncode=returncode)
    if returncode != 0:
        print(f"# {name} failed ({returncode}); the end of {log_path}:", file=sys.stderr)
        print(log_text[-3000:], file=sys.stderr)
        return result
    if not clock.is_file():
        print(f"# {name}: no training step was recorded, see {log_path}", file=sys.stderr)
        return result
    ready, first_step = (float(t) - started_wall for t in clock.read_text().split())
    result.seconds_to_first_step = first_step
    result.peak_before_step_gib = sampler.peak_gib(until=ready)
    result.peak_training_gib = sampler.peak_gib(since=ready)
    result.peak_by_role_gib = sampler.peak_by_role_gib()
    result.peak_anon_by_role_gib = sampler.peak_by_role_gib(anonymous=True)
    result.ready_by_role_gib = sampler.by_role_at_gib(ready)
    for rank_clock in run_dir.glob(FIRST_STEP_FILE + ".rank*"):  # each rank at its own start
        role = "rank" + rank_clock.name.rsplit(".rank", 1)[1]
        started_at, tree_kib = rank_clock.read_text().split()
        result.tree_at_start_gib[role] = int(tree_kib) / 2**20
        at_start = sampler.by_role_at_gib(float(started_at) - started_wall)
        result.ready_by_role_gib.update(
            {r: gib for r, gib in at_start.items() if r == role or r.startswith(role + "/")}
        )
    result.bpe_s = _logged_seconds(log_text, r"trained joint BPE .* in ([\d.]+) ?s")
    result.encode_s = _logged_seconds(
        log_text, r"encoded \d+ pairs of \S*train\S* .*in ([\d.]+) ?s"
    )
    result.write_s = _logged_seconds(
        log_text, r"encoded \d+ pairs of \S*train\S* .*writing ([\d.]+) ?s"
    )
    return result


def _logged_seconds(text: str, pattern: str) -> float | None:
    match = re.search(pattern, text)
    return float(match.group(1)) if match else None


def _fmt(value: float | None, digits: int = 1) -> str:
    """A figure, or "–" where there is none (e.g. a process that had not started yet)."""
    return "–" if value is None else f"{value:.{digits}f}"


def print_tables(results: dict[int, dict[str, Run]]) -> None:
    """The summary table (one row per N) and every process's PSS."""
    print(
        "\n| N pairs | BPE s | encode s (writing) | cold → 1st step s | prep peak GiB "
        "| warm → 1st step s | main before 1st step GiB | warm peak GiB "
        "| worker peak GiB (anonymous) "
        "| DDP peak GiB | 2nd rank + its workers before its step GiB |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n_pairs, runs in results.items():
        cold, warm, ddp = runs["cold"], runs["warm"], runs.get("ddp")
        workers, workers_anon = (
            [
                gib
                for run in (warm, ddp)
                if run is not None
                for role, gib in getattr(run, peaks).items()
                if "worker" in role
            ]
            for peaks in ("peak_by_role_gib", "peak_anon_by_role_gib")
        )
        main_ready = warm.ready_by_role_gib.get("main")
        second = ddp.tree_at_start_gib.get("rank1") if ddp else None
        print(
            f"| {n_pairs:,} | {_fmt(cold.bpe_s)} | {_fmt(cold.encode_s)} ({_fmt(cold.write_s)}) "
            f"| {_fmt(cold.seconds_to_first_step)} | {cold.peak_before_step_gib:.2f} "
            f"| {_fmt(warm.seconds_to_first_step)} | {_fmt(main_ready, 2)} "
            f"| {warm.peak_training_gib:.2f} | {_fmt(max(workers, default=None), 2)} "
            f"({_fmt(max(workers_anon, default=None), 2)}) "
            f"| {_fmt(ddp.peak_training_gib if ddp else None, 2)} | {_fmt(second, 2)} |"
        )
    print(
        "\nPSS per process (GiB) as the first step starts | peak over the run "
        "(peak of its anonymous part):"
    )
    for n_pairs, runs in results.items():
        for name, run in runs.items():
            roles = ", ".join(
                f"{role} {_fmt(run.ready_by_role_gib.get(role), 2)} | {peak:.2f} "
                f"({_fmt(run.peak_anon_by_role_gib.get(role), 2)})"
                for role, peak in sorted(run.peak_by_role_gib.items())
            )
            print(f"  N={n_pairs:,} {name}: {roles}")


def main() -> None:
    parser = script_parser(__doc__)
    parser.add_argument(
        "--sizes",
        default="0.5M,1M,2M,4.5M",
        help="training pairs N, comma-separated (0.5M, 200k, 1000)",
    )
    parser.add_argument("--vocab-size", type=int, default=37000)
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--num-workers", type=int, default=2, help="DataLoader workers per rank")
    parser.add_argument("--steps", type=int, default=10, help="optimizer steps per run")
    parser.add_argument("--no-ddp", action="store_true", help="skip the 2-rank run")
    parser.add_argument(
        "--work-dir",
        default=str(Path(tempfile.gettempdir()) / "transformer_nmt_bench_data"),
        help="corpora (kept for later runs), caches and run directories",
    )
    parser.add_argument("--multi30k-dir", default=DEFAULT_MULTI30K, help="word frequencies")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--report", default=None, help="print the tables of a --json file")
    args = parser.parse_args()
    if args.report:
        payload = json.loads(Path(args.report).read_text())
        print(f"# {payload['command']}")
        print_tables(
            {
                int(n): {name: Run(**run) for name, run in runs.items()}
                for n, runs in payload["results"].items()
            }
        )
        return
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    work_dir = Path(args.work_dir)

    machine = print_header("The data pipeline as the corpus grows (train.py, model=tiny, CPU)")
    results: dict[int, dict[str, Run]] = {}
    for n_pairs in sizes:
        corpus_dir = corpus(work_dir, n_pairs, Path(args.multi30k_dir), args.seed)
        cache_dir = work_dir / f"cache-{n_pairs}"
        shutil.rmtree(cache_dir, ignore_errors=True)
        runs = {}
        for name, devices in (("cold", 1), ("warm", 1), ("ddp", 2)):
            if name == "ddp" and args.no_ddp:
                continue
            run_dir = work_dir / "runs" / f"{n_pairs}-{name}"
            print(f"# N={n_pairs}: {name} run (load {load_average()})", file=sys.stderr)
            runs[name] = run_train(name, corpus_dir, cache_dir, run_dir, args, devices)
        results[n_pairs] = runs
        shutil.rmtree(cache_dir, ignore_errors=True)

    print(f"\nload average at the end: {load_average()}")
    print_tables(results)
    if args.json:
        payload = {
            "machine": machine,
            "command": "python " + " ".join(sys.argv),
            "results": {n: {k: asdict(r) for k, r in runs.items()} for n, runs in results.items()},
        }
        Path(args.json).write_text(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
