"""``python report.py <sweep dir>``: a sweep's summaries as a Table-3-style report.md and a plot,
with each job's attention panel."""

from __future__ import annotations

import argparse
from pathlib import Path

from transformer_nmt.tracking.report import write_report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Collect a `python train.py -m` sweep into report.md (a table laid out like "
        "the paper's Table 3, each job's attention panel beside its row) and report.png (BLEU "
        "and perplexity against the swept value, and the attention panels)."
    )
    parser.add_argument("sweep_dir", type=Path, help="a `python train.py -m` output directory")
    parser.add_argument("--out", type=Path, default=None, help="where to write (default: sweep)")
    parser.add_argument("--x", default=None, help="override key for the plot's x axis")
    args = parser.parse_args(argv)
    try:
        table_file, plot_file = write_report(args.sweep_dir, args.out, args.x)
    except FileNotFoundError as error:
        parser.exit(2, f"error: {error}\n")
    print(table_file.read_text())
    print(f"wrote {table_file} and {plot_file}")
