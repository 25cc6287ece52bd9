"""Memory of a whole process tree: proportional set size (PSS) summed over a process and all its
descendants (DDP ranks, DataLoader workers), sampled in a background thread.

Not part of the package: ``benchmarks/*.py`` import it as a sibling module. Linux only (reads
``/proc``). PSS charges a page shared by k processes 1/k to each, so the sum over the tree counts
a memory-mapped file or a copy-on-write page inherited by forked workers once, where the sum of
resident sizes would count it once per process. Each sample also keeps the anonymous part
(``Pss_Anon``: heaps, arrays, copied-on-write pages) apart from the file-backed part (shared
libraries and memory-mapped data, which the kernel can drop and read again).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

_PROC = Path("/proc")


def pss_kib(pid: int) -> tuple[int, int] | None:
    """The PSS of one process and its anonymous part (``Pss_Anon``), KiB; None if it is gone (or
    not readable)."""
    try:
        text = (_PROC / str(pid) / "smaps_rollup").read_text()
    except OSError:
        return None
    fields = dict(line.split()[:2] for line in text.splitlines()[1:] if line.endswith("kB"))
    if "Pss:" not in fields:
        return None
    return int(fields["Pss:"]), int(fields.get("Pss_Anon:", 0))


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (over all its threads)."""
    found: list[int] = []
    try:
        tasks = list((_PROC / str(pid) / "task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            found.extend(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
    return found


def process_tree(root: int) -> dict[int, int | None]:
    """``{pid: parent pid}`` for ``root`` (parent None) and all its descendants."""
    tree: dict[int, int | None] = {root: None}
    stack = [root]
    while stack:
        pid = stack.pop()
        for child in children(pid):
            if child not in tree:
                tree[child] = pid
                stack.append(child)
    return tree


def command_line(pid: int) -> str:
    try:
        return (_PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


@dataclass
class TreeSample:
    """One reading: seconds since the sampler started, and PSS per live process (KiB), all of it
    and its anonymous part."""

    t: float
    pss: dict[int, int]
    anon: dict[int, int] = field(default_factory=dict)

    @property
    def total_kib(self) -> int:
        return sum(self.pss.values())


@dataclass
class TreeMemorySampler:
    """Samples the PSS of ``root`` and its descendants every ``interval`` seconds until stopped.

    ``roles`` names each process seen: ``main``, ``rank1``, … (a child that runs another command
    line) and ``main/worker``, … (a forked child with its parent's command line, such as a
    DataLoader worker).
    """

    root: int
    interval: float = 0.2
    samples: list[TreeSample] = field(default_factory=list)
    roles: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._started = time.perf_counter()
        self._ranks = 0

    def start(self) -> TreeMemorySampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            tree = process_tree(self.root)
            readings, anonymous = {}, {}
            for pid, parent in tree.items():
                kib = pss_kib(pid)
                if kib is None:
                    continue
                readings[pid], anonymous[pid] = kib
                if pid not in self.roles:
                    self._name(pid, parent)
            if readings:
                now = time.perf_counter() - self._started
                self.samples.append(TreeSample(now, readings, anonymous))
            self._stop.wait(self.interval)

    def _name(self, pid: int, parent: int | None) -> None:
        command = command_line(pid)
        if parent is None:
            self.roles[pid] = "main"
        # the parent's command line read now: read when the parent was first seen, it may have
        # been the launcher's, from before the parent's exec
        elif command and command == command_line(parent):
            siblings = sum(
                r.startswith(self.roles[parent] + "/worker") for r in self.roles.values()
            )
            self.roles[pid] = f"{self.roles[parent]}/worker{siblings}"
        else:
            self._ranks += 1
            self.roles[pid] = f"rank{self._ranks}"

    def peak_gib(self, since: float = 0.0, until: float = float("inf")) -> float:
        """The highest total PSS (GiB) over the samples taken between ``since`` and ``until``."""
        totals = [s.total_kib for s in self.samples if since <= s.t <= until]
        return max(totals, default=0) / 2**20

    def peak_by_role_gib(
        self, since: float = 0.0, until: float = float("inf"), anonymous: bool = False
    ) -> dict[str, float]:
        """Each process's highest PSS (GiB) between ``since`` and ``until``, by role; with
        ``anonymous``, the highest of its anonymous part."""
        peaks: dict[str, float] = {}
        for sample in self.samples:
            if since <= sample.t <= until:
                for pid, kib in (sample.anon if anonymous else sample.pss).items():
                    role = self.roles.get(pid, str(pid))
                    peaks[role] = max(peaks.get(role, 0.0), kib / 2**20)
        return peaks

    def by_role_at_gib(self, t: float) -> dict[str, float]:
        """Each process's PSS (GiB) in the last sample taken at or before ``t``."""
        earlier = [s for s in self.samples if s.t <= t]
        if not earlier:
            return {}
        return {self.roles.get(pid, str(pid)): kib / 2**20 for pid, kib in earlier[-1].pss.items()}
