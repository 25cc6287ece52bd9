"""Collect a sweep into a Table-3-style report: ``python report.py multirun/<...> [--x KEY]``."""

from transformer_nmt.cli.report import main

if __name__ == "__main__":
    main()
