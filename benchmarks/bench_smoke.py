"""The README's quick start, timed end to end: ``train.py debug=smoke`` on Multi30k, then
``translate.py`` on its checkpoint, each as the user runs it (a fresh Python process).

    python benchmarks/bench_smoke.py [--data-dir /path/to/multi30k] [--repeats 3]

The first run starts from an empty tokenizer cache (``TRANSFORMER_NMT_CACHE`` in a temporary
directory: it trains the BPE and encodes the corpus, as a new user's first run does); the others
reuse that cache. Each row gives the wall-clock seconds and the load average before and after
(the machine may be shared: read the figures with the load beside them).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from timing import DEFAULT_MULTI30K, REPO_ROOT, load_average, print_header, script_parser


def timed(command: list[str], env: dict[str, str], stdin: str = "") -> tuple[float, str, str]:
    """(seconds, stdout, load before -> after) of one command; fails loudly if it fails."""
    before = load_average()
    start = time.perf_counter()
    result = subprocess.run(
        command, env=env, input=stdin, capture_output=True, encoding="utf-8", cwd=REPO_ROOT
    )
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return seconds, result.stdout, f"{before} -> {load_average()}"


def main() -> None:
    parser = script_parser(__doc__)
    parser.add_argument("--data-dir", default=DEFAULT_MULTI30K, help="Multi30k directory")
    parser.add_argument("--repeats", type=int, default=3, help="runs with the cache warm")
    parser.add_argument("--threads", default="1", help="OMP_NUM_THREADS, 1 as in the README")
    args = parser.parse_args()
    print_header("debug=smoke end to end (the README's quick start)")
    print(f"# OMP_NUM_THREADS={args.threads} for the commands")
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        env = {**os.environ, "TRANSFORMER_NMT_CACHE": str(Path(scratch) / "cache")}
        env.update(OMP_NUM_THREADS=args.threads, WANDB_MODE=env.get("WANDB_MODE", "offline"))
        for run in range(1 + args.repeats):
            run_dir = Path(scratch) / f"smoke{run}"
            train = [sys.executable, "train.py", "debug=smoke", "data=multi30k"]
            train += [f"data.data_dir={args.data_dir}", f"hydra.run.dir={run_dir}"]
            seconds, _, load = timed(train, env)
            rows.append(("train.py, cold cache" if run == 0 else "train.py, cached", seconds, load))
        checkpoint = Path(scratch) / "smoke0" / "checkpoints" / "best.ckpt"
        translate = [sys.executable, "translate.py", f"ckpt_path={checkpoint}"]
        seconds, output, load = timed(translate, env, stdin="A man rides a bike.\n")
        rows.append(("translate.py, one sentence", seconds, load))
    print("\n| run | wall s | load average before -> after |\n|---|---|---|")
    for name, seconds, load in rows:
        print(f"| {name} | {seconds:.1f} | {load} |")
    cached = [seconds for name, seconds, _ in rows if name == "train.py, cached"]
    if cached:
        print(f"\ncached train.py: median {statistics.median(cached):.1f} s of {len(cached)} runs")
    print(f"translate.py: A man rides a bike. -> {output.strip()}")


if __name__ == "__main__":
    main()
