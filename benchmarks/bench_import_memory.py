"""What a training process holds before it has any data or model: the memory of its imports.

    python benchmarks/bench_import_memory.py

Each row imports one more set of modules in a fresh ``python`` and reports the process's
anonymous PSS (heaps: module objects, code, C++ static state; ``Pss_Anon`` in
``/proc/self/smaps_rollup``) and its file-backed PSS (shared libraries), in MiB. Every DDP rank
is a fresh process and pays the anonymous part in full; forked DataLoader workers share it with
their rank. The last rows import single modules after torch alone, to show which of Lightning's
own imports cost what.
"""

from __future__ import annotations

import subprocess
import sys

# (label, import statement): cumulative rows first, then single modules after torch
ROWS = [
    ("python", "pass"),
    ("+ torch", "import torch"),
    ("+ lightning", "import torch, lightning"),
    ("+ hydra, datasets, tokenizers", "import torch, lightning, hydra, datasets, tokenizers"),
    ("+ our training entry point", "import transformer_nmt.cli.train"),
    ("torch, then torch._dynamo alone", "import torch, torch._dynamo"),
    ("torch, then torchmetrics alone", "import torch, torchmetrics"),
    ("torch, then transformers alone", "import torch, transformers"),
    ("torch, then matplotlib.pyplot alone", "import torch, matplotlib.pyplot"),
]

PROBE = """
import re
{statement}
text = open("/proc/self/smaps_rollup").read()
field = lambda name: int(re.search(name + r":\\s+(\\d+)", text).group(1)) / 1024
print(field("Pss_Anon"), field("Pss_File"))
"""


def measure(statement: str) -> tuple[float, float]:
    """Anonymous and file-backed PSS (MiB) of a fresh interpreter after ``statement``."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(statement=statement)],
        capture_output=True,
        text=True,
        check=True,
    )
    anonymous, file_backed = done.stdout.split()
    return float(anonymous), float(file_backed)


def main() -> None:
    print("| imports | anonymous PSS MiB | file-backed PSS MiB |")
    print("|---|---:|---:|")
    for label, statement in ROWS:
        anonymous, file_backed = measure(statement)
        print(f"| {label} | {anonymous:.0f} | {file_backed:.0f} |")


if __name__ == "__main__":
    main()
