"""The training loop: ``train.py`` against the bare training step, same process, model and batches.

    python benchmarks/bench_loop.py [--steps 40] [--repeats 3] [--threads 2] [--quick]

Each repeat runs ``python train.py experiment=multi30k`` for ``--steps`` optimizer steps (CSV
logging, its callbacks and progress bar; no validation or final evaluation) with a callback
added on the command line. The callback times train.py's steps after the first ``--warmup-steps``
(data loading included) and keeps every batch; when training ends it runs, in the same process
and with the same model, optimizer and schedule, the **bare step** on those batches: forward,
the fused loss, its token mean, backward, gradient clipping at norm 1, Adam, the schedule —
nothing else. The table gives the medians over repeats of target (non-pad) tokens per second.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import print_table  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]


def bare_loss(pl_module, batch: dict, pad_id: int) -> torch.Tensor:
    """The training loss as train.py computes it by default (the fused loss, token mean)."""
    from transformer_nmt.training.fused_loss import fused_loss

    model = pl_module.model
    hidden = model.forward_hidden(batch["src_ids"], batch["tgt_in_ids"])
    epsilon = 0.1  # conf/train.yaml's label_smoothing
    losses = fused_loss(hidden, model.output_projection.weight, batch["labels"], pad_id, epsilon)
    return losses.means()[0]


class LoopTimer(Callback):
    """Added to train.py on the command line (``+callbacks.loop_timer._target_=…``): writes to
    ``out`` the seconds and target tokens of train.py's timed steps and of the bare step's."""

    def __init__(self, out: str, warmup_steps: int) -> None:
        self.out, self.warmup_steps = out, warmup_steps
        self.batches: list[dict] = []
        self.start: float | None = None
        self.end, self.tokens = 0.0, 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.start is None and trainer.global_step == self.warmup_steps:
            self.start = time.perf_counter()
        self.batches.append(batch)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.start is not None:
            self.end = time.perf_counter()
            self.tokens += int((batch["labels"] != trainer.datamodule.pad_id).sum())

    @torch.enable_grad()
    def on_train_end(self, trainer, pl_module) -> None:
        pad_id = trainer.datamodule.pad_id
        optimizer = trainer.optimizers[0]
        scheduler = trainer.lr_scheduler_configs[0].scheduler
        parameters = list(pl_module.parameters())
        tokens, start = 0, None
        pl_module.train()
        for index, batch in enumerate(self.batches):
            if index == self.warmup_steps:
                start = time.perf_counter()
            bare_loss(pl_module, batch, pad_id).backward()
            torch.nn.utils.clip_grad_norm_(parameters, 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            if start is not None:
                tokens += int((batch["labels"] != pad_id).sum())
        bare = {"seconds": time.perf_counter() - start, "tokens": tokens}
        train_py = {"seconds": self.end - self.start, "tokens": self.tokens}
        Path(self.out).write_text(json.dumps({"bare step": bare, "train.py": train_py}))


def run_train_py(args, work: Path, index: int) -> dict:
    out = work / f"loop_{index}.json"
    overrides = [
        "experiment=multi30k",
        f"trainer.max_steps={args.steps}",
        "scheduler.cooldown=0",
        "trainer.limit_val_batches=0",
        "trainer.num_sanity_val_steps=0",
        "final_eval.splits=[]",
        "optimized_metric=null",
        "logger=csv",
        f"data.cache_dir={work / 'cache'}",
        f"hydra.run.dir={work / f'run_{index}'}",
        "+callbacks.loop_timer._target_=bench_loop.LoopTimer",
        f"+callbacks.loop_timer.out={out}",
        f"+callbacks.loop_timer.warmup_steps={args.warmup_steps}",
    ]
    path = os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    if args.threads:
        env.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    command = [sys.executable, str(REPO_ROOT / "train.py"), *overrides]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=work)
    if done.returncode != 0:
        raise SystemExit(f"train.py failed:\n{done.stderr[-4000:]}")
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps per run (40)")
    parser.add_argument("--warmup-steps", type=int, default=5, help="untimed first steps (5)")
    parser.add_argument("--repeats", type=int, default=3, help="train.py runs (3)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument("--quick", action="store_true", help="one run of 12 steps")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.warmup_steps, args.repeats = 12, 2, 1
    if args.threads:
        torch.set_num_threads(args.threads)  # for the machine line
    rates: dict[str, list[float]] = {"bare step": [], "train.py": []}
    with tempfile.TemporaryDirectory(prefix="bench_loop_") as work:
        for index in range(args.repeats):
            for name, timed in run_train_py(args, Path(work), index).items():
                rates[name].append(timed["tokens"] / timed["seconds"])
                print(f"  run {index + 1} {name}: {rates[name][-1]:.0f} tok/s", file=sys.stderr)
    bare = statistics.median(rates["bare step"])
    rows = [
        [
            name,
            f"{statistics.median(r):,.0f}",
            f"{min(r):,.0f}–{max(r):,.0f}",
            f"**{statistics.median(r) / bare:.3f}**",
        ]
        for name, r in rates.items()
    ]
    print_table(
        f"experiment=multi30k, steps {args.warmup_steps + 1}–{args.steps}, {args.repeats} run(s)",
        ["loop", "target tokens/s (median)", "min–max", "÷ bare step"],
        rows,
    )


if __name__ == "__main__":
    main()
