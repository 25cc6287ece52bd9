"""Shared helpers of the benchmark scripts: the common command line, an interleaved median
timer, an Adam training step, peak memory (resident growth, PSS of a process tree), a table.

Not part of the package: ``benchmarks/*.py`` import it as a sibling module.

Why interleaved: the benchmark machines are shared (a 2-core CPU with other jobs on it), so
the load changes from one second to the next. Running the competitors in turn — A, B, C, then
B, C, A, … — inside one process exposes them all to the same load, and the median over
rounds ignores the odd round that a neighbour's job slowed down.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
# Multi30k task 1 ({train,val,test_2016_flickr}.{en,de}.gz): $MULTI30K_DIR, else data/multi30k
DEFAULT_MULTI30K = os.environ.get("MULTI30K_DIR", str(REPO_ROOT / "data" / "multi30k"))


def script_parser(doc: str) -> argparse.ArgumentParser:
    """The argument parser of a benchmark script whose docstring is a title line, a usage block
    and the explanation: ``--help`` shows the title and, after the options, the explanation."""
    title, _usage, explanation = (doc.split("\n\n", 2) + ["", ""])[:3]
    return argparse.ArgumentParser(
        description=title,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=explanation,
    )


def benchmark_parser(doc: str, repeats: int = 5, data_dir: bool = True) -> argparse.ArgumentParser:
    """A parser whose help is the script's docstring, with the options every benchmark takes:
    ``--repeats``, ``--warmup``, ``--threads``, ``--tune-malloc``, ``--seed``, ``--json`` and
    (``data_dir``) ``--data-dir``. :func:`apply_machine_options` acts on them."""
    parser = script_parser(doc)
    if data_dir:
        parser.add_argument(
            "--data-dir",
            default=DEFAULT_MULTI30K,
            help="Multi30k (default: $MULTI30K_DIR, else data/multi30k)",
        )
    parser.add_argument(
        "--repeats", type=int, default=repeats, help=f"timed rounds (default {repeats})"
    )
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds (default 1)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument(
        "--tune-malloc", action="store_true", help="keep large blocks in glibc's heap (all alike)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="also write the results here")
    return parser


def apply_machine_options(args: argparse.Namespace) -> bool:
    """Set torch's threads (``--threads``) and tune glibc's malloc (``--tune-malloc``); returns
    whether malloc was tuned."""
    if args.threads:
        torch.set_num_threads(args.threads)
    return tune_malloc() if args.tune_malloc else False


def adam_step(
    forward: Callable, parameters, pad_id: int = 0, epsilon: float = 0.1
) -> Callable[[dict], None]:
    """A function running one Adam step (lr 1e-4, β = (0.9, 0.98), ε = 1e-9) on a batch dict:
    ``forward(src_ids, tgt_in_ids)`` -> logits, label-smoothed cross-entropy per target token,
    backward, step. The same for every competitor of a benchmark."""
    import torch.nn.functional as F

    optimizer = torch.optim.Adam(parameters, lr=1e-4, betas=(0.9, 0.98), eps=1e-9)

    def step(batch: dict) -> None:
        logits = forward(batch["src_ids"], batch["tgt_in_ids"])
        loss = F.cross_entropy(
            logits.flatten(0, 1),
            batch["labels"].flatten(),
            ignore_index=pad_id,
            label_smoothing=epsilon,
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


@dataclass
class Result:
    """Timings of one competitor: ``seconds`` holds one entry per timed round."""

    name: str
    seconds: list[float] = field(default_factory=list)
    cpu_seconds: list[float] = field(default_factory=list)  # process CPU time, every thread
    tokens: int = 0  # target (non-pad) tokens processed per timed call
    peak_mib: float | None = None  # extra resident memory at the peak of one call
    note: str = ""

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)

    @property
    def cpu_median_s(self) -> float:
        return statistics.median(self.cpu_seconds)

    @property
    def spread(self) -> tuple[float, float]:
        """(fastest, slowest) round, seconds."""
        return min(self.seconds), max(self.seconds)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.median_s if self.tokens else float("nan")


def interleaved(
    competitors: Mapping[str, Callable[[], object]],
    repeats: int,
    warmup: int = 1,
    verbose: bool = True,
) -> dict[str, Result]:
    """Time every competitor ``repeats`` times, in turn, after ``warmup`` untimed rounds: wall
    time, and the process's CPU time (less disturbed by other jobs on a shared machine).

        Round r runs the competitors rotated by r (A B C, B C A, C A B, …), so none is always
        first after a garbage collection or always last before one.
    """
    names = list(competitors)
    results = {name: Result(name) for name in names}
    for round_index in range(warmup + repeats):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            gc.collect()
            start, cpu_start = time.perf_counter(), time.process_time()
            competitors[name]()
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
            if round_index >= warmup:
                results[name].seconds.append(elapsed)
                results[name].cpu_seconds.append(cpu)
        if verbose and round_index >= warmup:
            times = ", ".join(f"{n} {results[n].seconds[-1] * 1e3:.0f}" for n in names)
            print(f"  round {round_index - warmup + 1}/{repeats} (ms): {times}", file=sys.stderr)
    return results


def _proc_status_mib(key: str) -> float:
    with open("/proc/self/status") as status:
        match = re.search(rf"^{key}:\s+(\d+) kB", status.read(), re.MULTILINE)
    return int(match.group(1)) / 1024 if match else float("nan")


def peak_memory_mib(function: Callable[[], object]) -> float | None:
    """Extra memory at the peak of one call of ``function``, MiB.

    On CUDA: the peak of ``torch.cuda.max_memory_allocated`` above the memory allocated before.
    On CPU (Linux): the peak resident set size (VmHWM, reset through /proc/self/clear_refs)
    above the resident size before the call. Memory that the allocator kept from earlier calls
    is reused and not counted, so run it after a warm-up call. None where neither is available.
    """
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        function()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - before) / 2**20
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # reset the peak RSS (VmHWM) to the current RSS
    except OSError:
        return None
    before = _proc_status_mib("VmRSS")
    function()
    return _proc_status_mib("VmHWM") - before


def process_tree_pss_mib(pid: int) -> float:
    """Proportional set size of process ``pid`` and all its descendants, MiB (Linux): shared
    pages are split among the processes that map them, so the sum counts each page once."""
    total_kib, pending, seen = 0, [pid], set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            with open(f"/proc/{current}/smaps_rollup") as rollup:
                match = re.search(r"^Pss:\s+(\d+) kB", rollup.read(), re.MULTILINE)
            total_kib += int(match.group(1)) if match else 0
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as children:
                    pending.extend(int(child) for child in children.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue  # the process ended meanwhile
    return total_kib / 1024


class PeakPss:
    """The peak PSS of a process tree (this process by default), sampled every ``interval``
    seconds by a background thread while the ``with`` block runs. Reading PSS walks page tables:
    measure memory in runs apart from the timed ones."""

    def __init__(self, pid: int | None = None, interval: float = 0.01) -> None:
        self.pid = os.getpid() if pid is None else pid
        self.interval = interval
        self.start_mib = self.peak_mib = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakPss:
        self.start_mib = self.peak_mib = process_tree_pss_mib(self.pid)
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_mib = max(self.peak_mib, process_tree_pss_mib(self.pid))

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak_mib = max(self.peak_mib, process_tree_pss_mib(self.pid))


def tune_malloc() -> bool:
    """Keep freed memory in glibc's heap (``train.py``'s ``keep_freed_host_memory``): whole
    process, hence every competitor alike. Returns whether it took effect (glibc only).
    """
    from transformer_nmt.host_memory import keep_freed_memory

    return keep_freed_memory()


def machine_description() -> dict:
    """What ran the benchmark: CPU, threads, versions, load, date."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            names = re.findall(r"^model name\s*:\s*(.+)$", info.read(), re.MULTILINE)
        if names:
            cpu = f"{names[0]} x{len(names)}"
    except OSError:
        pass
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }


def print_header(title: str, malloc_tuned: bool = False) -> dict:
    machine = machine_description()
    machine["malloc_tuned"] = malloc_tuned
    load = machine["load_average"]
    print(f"# {title}")
    print(
        f"# {machine['date']} | {machine['cpu']} | torch {machine['torch']} "
        f"({machine['torch_threads']} threads) | load average {load[0]:.2f} {load[1]:.2f} "
        f"{load[2]:.2f}"
        if load
        else ""
    )
    print("# command: python " + " ".join(sys.argv))
    if malloc_tuned:
        print("# glibc malloc tuned: large blocks stay in the heap (see timing.tune_malloc)")
    return machine


def print_table(results: Mapping[str, Result], reference: str, title: str = "") -> None:
    """A Markdown table, one row per competitor: median and range of the timed rounds,
    tokens/s, peak MiB, the ratio competitor / ``reference`` of the median times (> 1: the
    reference is faster), and the same by process CPU time."""
    if title:
        print(f"\n## {title}")
    ours = results[reference]
    print(
        "| competitor | median ms | min–max ms | tokens/s | peak MiB "
        f"| it ÷ {reference} (time) | CPU ms | it ÷ {reference} (CPU) | note |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, result in results.items():
        fastest, slowest = result.spread
        peak = f"{result.peak_mib:.0f}" if result.peak_mib is not None else "–"
        ratio = result.median_s / ours.median_s
        cpu_ratio = result.cpu_median_s / ours.cpu_median_s
        print(
            f"| {name} | {result.median_s * 1e3:.1f} | {fastest * 1e3:.0f}–{slowest * 1e3:.0f} "
            f"| {result.tokens_per_s:.0f} | {peak} | **{ratio:.2f}** "
            f"| {result.cpu_median_s * 1e3:.0f} | {cpu_ratio:.2f} | {result.note} |"
        )


def dump_json(
    path: str | None,
    machine: dict,
    tables: Mapping[str, Mapping[str, Result]],
    extra: dict | None = None,
) -> None:
    """Write the machine, every table's results and ``extra`` to ``path`` (if given)."""
    if not path:
        return
    payload = {
        **(extra or {}),
        "machine": machine,
        "command": "python " + " ".join(sys.argv),
        "tables": {
            title: {
                name: {
                    **asdict(result),
                    "median_ms": result.median_s * 1e3,
                    "tokens_per_s": result.tokens_per_s,
                }
                for name, result in results.items()
            }
            for title, results in tables.items()
        },
    }
    Path(path).write_text(json.dumps(payload, indent=2))
    print(f"\nwrote {path}")


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


@contextmanager
def multi30k(data_dir: str, max_tokens: int = 2048, seed: int = 0) -> Iterator:
    """A set-up Multi30k ``TranslationDataModule`` (8k joint BPE, en→de), cached in a temporary
    directory that is removed afterwards (a few seconds to build)."""
    from transformer_nmt.data import TranslationDataModule

    with tempfile.TemporaryDirectory(prefix="transformer_nmt_bench_") as cache:
        dm = TranslationDataModule(
            source="text_files",
            data_dir=data_dir,
            splits={"test": "test_2016_flickr"},
            vocab_size=8000,
            max_tokens=max_tokens,
            seed=seed,
            cache_dir=cache,
        )
        dm.setup(None)
        yield dm
