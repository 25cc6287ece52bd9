"""What checking translate.py's input costs: reading it as before vs checking it as UTF-8 first.

    python benchmarks/bench_input_check.py [--lines 1000000] [--repeats 5] [--json out.json]

The input is Multi30k's English training sentences ($MULTI30K_DIR), repeated to ``--lines``
lines, in a temporary file. Competitors, each reading every line to the end:

- ``text stream``: iterating a UTF-8 text wrapper over the file, as translate.py read stdin
  before the check (it failed mid-way on an invalid byte).
- ``strict, file``: ``checked_lines`` on the file (stdin redirected from a file): checked in
  place, then read again.
- ``strict, pipe``: ``checked_lines`` on a pipe that a thread fills from the file (stdin from
  another program): copied into a temporary file while checked, then read from it.
- ``replace``: ``checked_lines(..., "replace")``, which reads ahead nothing.

Medians of interleaved rounds (``timing.interleaved``); the load average is printed with them.
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import DEFAULT_MULTI30K, dump_json, interleaved, print_header  # noqa: E402

from transformer_nmt.cli.text_input import checked_lines  # noqa: E402


def write_input(path: Path, data_dir: str, lines: int) -> int:
    """``lines`` lines of Multi30k English into ``path``; returns its size in bytes."""
    with gzip.open(Path(data_dir) / "train.en.gz", "rb") as handle:
        sentences = handle.read().splitlines(keepends=True)
    with open(path, "wb") as out:
        for i in range(lines):
            out.write(sentences[i % len(sentences)])
    return path.stat().st_size


def read_text_stream(path: Path) -> int:
    with open(path, "rb") as raw:
        return sum(1 for _ in io.TextIOWrapper(raw, encoding="utf-8", newline="\n"))


def read_checked(path: Path, input_errors: str = "strict") -> int:
    with open(path, "rb") as raw, checked_lines(raw, input_errors) as lines:
        return sum(1 for _ in lines)


def read_checked_pipe(path: Path) -> int:
    read_end, write_end = os.pipe()

    def fill() -> None:
        with open(path, "rb") as source, os.fdopen(write_end, "wb") as sink:
            shutil.copyfileobj(source, sink)

    filler = threading.Thread(target=fill)
    filler.start()
    with os.fdopen(read_end, "rb") as pipe, checked_lines(pipe) as lines:
        count = sum(1 for _ in lines)
    filler.join()
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--data-dir", default=DEFAULT_MULTI30K)
    parser.add_argument("--json", default=None, help="also write the timings here")
    args = parser.parse_args()
    machine = print_header("translate.py input check: reading as before vs checking UTF-8 first")
    with tempfile.TemporaryDirectory(prefix="bench_input_check_") as tmp:
        path = Path(tmp) / "input.en"
        size = write_input(path, args.data_dir, args.lines)
        competitors = {
            "text stream": lambda: read_text_stream(path),
            "strict, file": lambda: read_checked(path),
            "strict, pipe": lambda: read_checked_pipe(path),
            "replace": lambda: read_checked(path, "replace"),
        }
        assert {name: run() for name, run in competitors.items()} == dict.fromkeys(
            competitors, args.lines
        )
        results = interleaved(competitors, args.repeats, verbose=False)
    reference = results["text stream"].median_s
    print(f"\n{args.lines} lines, {size / 1e6:.1f} MB; median of {args.repeats} rounds\n")
    print("| competitor | median s | min–max s | MB/s | µs per line | ÷ text stream |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, result in results.items():
        low, high = result.spread
        print(
            f"| {name} | {result.median_s:.2f} | {low:.2f}–{high:.2f} "
            f"| {size / 1e6 / result.median_s:.0f} | {result.median_s / args.lines * 1e6:.2f} "
            f"| {result.median_s / reference:.2f} |"
        )
    dump_json(args.json, machine, {f"{args.lines} lines": results})


if __name__ == "__main__":
    main()
