"""What every benchmark script measures with: median times (``torch.utils.benchmark``), the PSS
of a process tree (``psutil``), the machine line and the Markdown table each script prints.

Not part of the package: ``benchmarks/*.py`` import it as a sibling module.
"""

from __future__ import annotations

import contextlib
import os
import platform
import threading
from collections.abc import Callable, Sequence

import psutil
import torch
from torch.utils.benchmark import Timer


def median_s(function: Callable[[], object], min_run_time: float) -> float:
    """Median seconds of one call of ``function`` over repeated calls lasting at least
    ``min_run_time`` in all (``Timer.blocked_autorange``, at torch's current thread count)."""
    timer = Timer("function()", globals={"function": function}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time).median


def tree_pss_bytes(pid: int | None = None) -> int:
    """Proportional set size of a process and all its descendants (DDP ranks, DataLoader
    workers): a page shared by k processes counts 1/k for each, so the sum counts it once."""
    root = psutil.Process(pid)
    total = 0
    for process in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):  # ended meanwhile
            total += process.memory_full_info().pss
    return total


class PeakTreePss:
    """``with PeakTreePss(pid) as peak:`` samples :func:`tree_pss_bytes` every ``interval``
    seconds in a thread; ``peak.start`` and ``peak.peak`` are in bytes. Each sample walks page
    tables: measure memory apart from timed runs."""

    def __init__(self, pid: int | None = None, interval: float = 0.05) -> None:
        self.pid, self.interval = pid or os.getpid(), interval
        self.start = self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakTreePss:
        self.start = self.peak = tree_pss_bytes(self.pid)
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.peak = max(self.peak, tree_pss_bytes(self.pid))
            except psutil.NoSuchProcess:
                return


def machine_line() -> str:
    """The GPU or CPU model, cores, torch version and threads, and the load average."""
    if torch.cuda.is_available():
        device = torch.cuda.get_device_name()
    else:
        device = platform.processor() or platform.machine()
        try:
            with open("/proc/cpuinfo") as info:
                device = next(ln.split(":", 1)[1].strip() for ln in info if "model name" in ln)
        except (OSError, StopIteration):
            pass
    return (
        f"{device}, {psutil.cpu_count()} CPU cores, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), load average {os.getloadavg()[0]:.1f}"
    )


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """The script's one table, in Markdown, under its title and the machine line."""
    print(f"## {title}\n\n{machine_line()}\n")
    print("| " + " | ".join(header) + " |")
    print("|---|" + "---:|" * (len(header) - 1))
    for row in rows:
        print("| " + " | ".join(str(cell) for cell in row) + " |")
