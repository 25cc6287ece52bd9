"""The training loop: ``train.py`` against the bare training step, same model, batches, threads.

    python benchmarks/bench_loop.py [--steps 40] [--warmup-steps 5] [--repeats 3] [--threads 2]
        [--plain-loss] [--no-progress-bar] [--train-tree PATH] [--json out.json]
    python benchmarks/bench_loop.py --profile [--steps 40] [--train-tree PATH]
        [--profile-before PATH]

The model, batches and schedule are ``experiment=multi30k``'s (``conf/experiment/multi30k.yaml``),
the first ``--steps`` batches of epoch 0; glibc's malloc is tuned in both, as ``train.py``
does by default (``keep_freed_host_memory``).

* **bare step**: a plain PyTorch loop over those batches, collated beforehand: forward, the
  loss ``train.py`` uses (the fused loss, or ``--plain-loss``: logits, then
  ``label_smoothed_loss``), its mean over the batch's target tokens, backward, gradient
  clipping at norm 1, Adam, the learning-rate schedule. Nothing else.
* **train.py**: ``python <train tree>/train.py experiment=multi30k`` itself, in a subprocess,
  for ``--steps`` optimizer steps, with CSV logging, its callbacks and its progress bar
  (``--no-progress-bar`` turns it off), without validation or final evaluation. A callback
  added on the command line times it.

Both time steps ``--warmup-steps`` + 1 to ``--steps`` (data loading included for train.py) and
count the same target tokens; the two alternate for ``--repeats`` rounds and the table gives
medians, of wall time and of the process's CPU time (all its threads): on a machine shared with
other jobs the CPU time is the steadier measure of the work done, at one thread especially.
``--train-tree`` runs another checkout's train.py (e.g. an older commit unpacked with
``git archive <commit> | tar -x -C <dir>``) against this checkout's bare step.

``--profile`` runs the train tree's ``train()`` in-process under cProfile instead and prints
the milliseconds per optimizer step that each part of the loop takes (profiler overhead
included, so the Python-heavy parts look larger than they are); ``--profile-before PATH`` adds
a column for another checkout, e.g. the code before a change, so the table shows what it removed.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import (  # noqa: E402
    REPO_ROOT,
    apply_machine_options,
    benchmark_parser,
    load_average,
    print_header,
)

BENCHMARKS_DIR = Path(__file__).resolve().parent


def clocks() -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process, all threads)."""
    return time.perf_counter(), time.process_time()


class StepTimer(Callback):
    """Added to ``train.py`` with ``+callbacks.loop_timer._target_=bench_loop.StepTimer``: the
    wall and CPU seconds and target tokens from the start of optimizer step ``warmup_steps`` + 1
    to the end of the last one, written to ``out`` as JSON when training ends."""

    def __init__(self, out: str, warmup_steps: int) -> None:
        self.out, self.warmup_steps = out, warmup_steps
        self._start: tuple[float, float] | None = None
        self._end = (0.0, 0.0)
        self._tokens = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self._start is None and trainer.global_step == self.warmup_steps:
            self._start = clocks()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._start is not None:
            self._end = clocks()
            self._tokens += int((batch["labels"] != pl_module.hparams.pad_id).sum())

    def on_train_end(self, trainer, pl_module) -> None:
        wall, cpu = (end - start for end, start in zip(self._end, self._start, strict=True))
        Path(self.out).write_text(json.dumps({"wall": wall, "cpu": cpu, "tokens": self._tokens}))


def train_overrides(args, cache_dir: str, run_dir: str) -> list[str]:
    """The train.py command line of one timed run."""
    overrides = [
        "experiment=multi30k",
        f"data.data_dir={args.data_dir}",
        f"data.cache_dir={cache_dir}",
        f"seed={args.seed}",
        "logger=csv",
        f"trainer.max_steps={args.steps}",
        "trainer.num_sanity_val_steps=0",
        "final_eval.splits=[]",
        f"hydra.run.dir={run_dir}",
    ]
    train_yaml = (args.train_tree / "conf" / "train.yaml").read_text()
    if "optimized_metric" in train_yaml:  # (an older tree has none)
        overrides.append("optimized_metric=null")  # no final evaluation at all
    if "cooldown" in (args.train_tree / "conf" / "experiment" / "multi30k.yaml").read_text():
        overrides.append("scheduler.cooldown=0")  # the recipe's cooldown is longer than the run
    if args.no_progress_bar:
        overrides.append("trainer.enable_progress_bar=false")
    if args.plain_loss and "fused_loss" in train_yaml:
        overrides.append("fused_loss=false")  # (a tree from before the fused loss has only plain)
    return overrides


def compose(tree: Path, overrides: list[str]):
    """``conf/train.yaml`` of ``tree`` composed with ``overrides``, as train.py composes it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    try:
        from transformer_nmt.cli.config_schemas import register_config_schemas
    except ImportError:  # an older checkout: plain YAML, no typed schemas
        pass
    else:
        register_config_schemas()
    with initialize_config_dir(config_dir=str(tree / "conf"), version_base="1.3"):
        return hydra_compose("train", overrides=overrides)


# -- the bare step ------------------------------------------------------------------------------


def bare_setup(args, cache_dir: str):
    """The model, optimizer, schedule and collated batches train.py would use; a function that
    trains on them and returns the wall and CPU seconds and target tokens of the timed steps."""
    import lightning.pytorch as pl
    from omegaconf import OmegaConf

    from transformer_nmt.cli.train_config import build_model_config, model_options
    from transformer_nmt.data import TranslationDataModule
    from transformer_nmt.model import Transformer
    from transformer_nmt.training.fused_loss import fused_loss
    from transformer_nmt.training.loss import label_smoothed_loss
    from transformer_nmt.training.optimizer import AdamConfig, build_adam
    from transformer_nmt.training.schedules import StepSchedule, build_scheduler

    cfg = compose(REPO_ROOT, train_overrides(args, cache_dir, "unused"))
    pl.seed_everything(cfg.seed)
    datamodule = TranslationDataModule(OmegaConf.to_object(cfg.data))
    datamodule.setup("fit")
    loader = iter(datamodule.train_dataloader())
    batches = [next(loader) for _ in range(args.steps)]
    pad_id = datamodule.pad_id
    options = model_options(cfg.model, datamodule.max_len)
    config = build_model_config(options, datamodule.vocab_size, pad_id)
    epsilon = cfg.label_smoothing

    def run() -> dict:
        model = Transformer(config).train()
        optimizer = build_adam(model.parameters(), AdamConfig(**cfg.optimizer))
        scheduler = build_scheduler(optimizer, StepSchedule(**cfg.scheduler))
        start, tokens = None, 0
        for index, batch in enumerate(batches):
            if index == args.warmup_steps:
                start = clocks()
            labels = batch["labels"]
            if args.plain_loss:
                logits = model(batch["src_ids"], batch["tgt_in_ids"])
                losses = label_smoothed_loss(logits, labels, pad_id, epsilon)
            else:
                hidden = model.forward_hidden(batch["src_ids"], batch["tgt_in_ids"])
                weight = model.output_projection.weight
                losses = fused_loss(hidden, weight, labels, pad_id, epsilon)
            loss, _ = losses.means()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.trainer.gradient_clip_val)
            optimizer.step()
            scheduler.step()
            if start is not None:
                tokens += int((labels != pad_id).sum())
        wall, cpu = (end - begin for end, begin in zip(clocks(), start, strict=True))
        return {"wall": wall, "cpu": cpu, "tokens": tokens}

    return run


# -- train.py -----------------------------------------------------------------------------------


def train_py_run(args, cache_dir: str, workdir: Path, round_index: int) -> dict:
    """One train.py subprocess; wall and CPU seconds and target tokens of its timed steps."""
    out = workdir / f"timer_{round_index}.json"
    overrides = train_overrides(args, cache_dir, str(workdir / f"run_{round_index}"))
    overrides += [
        "+callbacks.loop_timer._target_=bench_loop.StepTimer",
        f"+callbacks.loop_timer.out={out}",
        f"+callbacks.loop_timer.warmup_steps={args.warmup_steps}",
    ]
    done = subprocess.run(
        [sys.executable, str(args.train_tree / "train.py"), *overrides],
        cwd=workdir,
        env=child_environment(args),
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"train.py failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return json.loads(out.read_text())


def child_environment(args) -> dict[str, str]:
    """The train tree's package and this directory (for StepTimer) first on the path; the same
    threads as the bare step."""
    path = [str(args.train_tree / "src"), str(BENCHMARKS_DIR), os.environ.get("PYTHONPATH", "")]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
    environment.setdefault("WANDB_MODE", "offline")
    threads = str(args.threads or torch.get_num_threads())
    environment.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    return environment


# -- profile -------------------------------------------------------------------------------------

# (row, how to find its time in the profile: (file suffix, function name[, caller name]))
PROFILE_ROWS = [
    ("forward + loss (the module's _losses)", [("training/module.py", "_losses")]),
    ("backward", [("autograd/__init__.py", "backward")]),
    ("Adam's arithmetic", [("optim/adam.py", "adam")]),
    (
        "gradient norm + clipping",
        [
            ("training/module.py", "configure_gradient_clipping"),
            ("core/module.py", "configure_gradient_clipping"),
            ("training/update.py", "finish"),
        ],
    ),
    ("lr schedule step", [("optim/lr_scheduler.py", "step")]),
    (
        "next batch (DataLoader, collation in the main process)",
        [("data/dataloader.py", "__next__")],
    ),
    (
        "non-finite check (per micro-batch sync + all-reduce before)",
        [
            ("training/loss.py", "check_finite_loss"),
            ("strategies/strategy.py", "reduce_boolean_decision"),
        ],
    ),
    (
        "the module's self.log calls",
        [
            ("core/module.py", "log", "training_step"),
            ("core/module.py", "log", "on_before_optimizer_step"),
        ],
    ),
    (
        "our callbacks' per-batch hooks (throughput, training log, reseeding)",
        [
            ("transformer_nmt/callbacks/throughput.py", "on_train_batch_end"),
            ("transformer_nmt/callbacks/training_log.py", "on_train_batch_end"),
            ("transformer_nmt/callbacks/step_seed.py", "on_train_batch_start"),
            # an older checkout kept them in one file
            ("transformer_nmt/training/callbacks.py", "on_train_batch_end"),
            ("transformer_nmt/training/callbacks.py", "on_train_batch_start"),
        ],
    ),
    (
        "progress bar",
        [
            ("progress/rich_progress.py", "on_train_batch_end"),
            ("progress/rich_progress.py", "on_train_batch_start"),
        ],
    ),
    (
        "metrics to loggers and progress bar",
        [("logger_connector/logger_connector.py", "update_train_step_metrics")],
    ),
]
STEP_ROW = ("one optimizer step, all of it", [("loops/training_epoch_loop.py", "advance")])


def profile_row_ms(stats: pstats.Stats, patterns, steps: int) -> float:
    """Cumulative milliseconds per step of the functions a row names (recursion counted once)."""
    total = 0.0
    for pattern in patterns:
        suffix, name, *caller = pattern
        for (file, _, function), (_, _, _, cumulative, callers) in stats.stats.items():
            if not (file.endswith(suffix) and function == name):
                continue
            if caller:
                total += sum(v[3] for (_, _, f), v in callers.items() if f == caller[0])
            else:
                total += cumulative
    return total * 1e3 / steps


def train_function():
    """The train tree's ``train(cfg)``."""
    try:
        from transformer_nmt.cli.train import train
    except ImportError:  # an older checkout's layout
        from transformer_nmt.training import train
    return train


def profile(args) -> None:
    """(in the train tree's environment) cProfile train() for --steps steps; write the
    milliseconds per step of every row to --profile-out (JSON)."""
    train = train_function()
    with tempfile.TemporaryDirectory(prefix="bench_loop_") as workdir:
        overrides = train_overrides(args, args.cache_dir, str(Path(workdir) / "run"))
        cfg = compose(args.train_tree, [*overrides, f"output_dir={workdir}/run"])
        profiler = cProfile.Profile()
        profiler.enable()
        train(cfg)
        profiler.disable()
    stats = pstats.Stats(profiler)
    rows = {name: profile_row_ms(stats, patterns, args.steps) for name, patterns in PROFILE_ROWS}
    step = {STEP_ROW[0]: profile_row_ms(stats, STEP_ROW[1], args.steps)}
    Path(args.profile_out).write_text(json.dumps({**step, **rows}))


def print_profile_table(args, profiles: dict[str, dict[str, float]]) -> None:
    """One column of milliseconds per step (and share of the step) per train tree."""
    names = list(profiles)
    print(f"\n## where a train.py step goes (cProfile, {args.steps} steps)")
    print("| part | " + " | ".join(f"{n} ms/step | share" for n in names) + " |")
    print("|---|" + "---:|---:|" * len(names))
    for row in [STEP_ROW[0], *(name for name, _ in PROFILE_ROWS)]:
        cells = []
        for profile_ms in profiles.values():
            ms, step_ms = profile_ms[row], profile_ms[STEP_ROW[0]]
            cells.append(f"{ms:.1f} | {ms / step_ms:.1%}")
        print(f"| {row} | " + " | ".join(cells) + " |")


# -- command line --------------------------------------------------------------------------------


def main() -> None:
    parser = benchmark_parser(__doc__, repeats=3)
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps per run (40)")
    parser.add_argument("--warmup-steps", type=int, default=5, help="untimed first steps (5)")
    parser.add_argument("--plain-loss", action="store_true", help="logits, then the loss")
    parser.add_argument("--no-progress-bar", action="store_true")
    parser.add_argument(
        "--train-tree", type=Path, default=REPO_ROOT, help="the checkout whose train.py runs"
    )
    parser.add_argument("--profile", action="store_true", help="profile train.py instead")
    parser.add_argument(
        "--profile-before",
        type=Path,
        default=None,
        help="with --profile: also profile this checkout and print the two side by side",
    )
    parser.add_argument("--cache-dir", default=None, help=argparse.SUPPRESS)  # internal
    parser.add_argument("--profile-out", default=None, help=argparse.SUPPRESS)  # internal
    args = parser.parse_args()
    args.tune_malloc = True  # as train.py's keep_freed_host_memory
    args.train_tree = args.train_tree.resolve()
    if args.cache_dir is not None:  # the profiling subprocess
        args.tune_malloc = False  # the train tree's train() tunes it, as train.py does
        apply_machine_options(args)
        profile(args)
        return
    malloc_tuned = apply_machine_options(args)
    machine = print_header("The training loop: train.py vs the bare step", malloc_tuned)
    with tempfile.TemporaryDirectory(prefix="bench_loop_") as workdir:
        cache_dir = str(Path(workdir) / "cache")
        bare = bare_setup(args, cache_dir)  # trains the BPE into the shared cache
        if args.profile:
            trees = {"train.py": args.train_tree}
            if args.profile_before is not None:
                trees = {"before": args.profile_before.resolve(), **trees}
            profiles = {}
            for name, tree in trees.items():
                out = Path(workdir) / f"profile_{name}.json"
                command = [sys.executable, __file__, *sys.argv[1:], "--train-tree", str(tree)]
                command += ["--cache-dir", cache_dir, "--profile-out", str(out)]
                environment = child_environment(
                    argparse.Namespace(**{**vars(args), "train_tree": tree})
                )
                subprocess.run(command, env=environment, check=True)
                profiles[name] = json.loads(out.read_text())
            print_profile_table(args, profiles)
            return
        results = {"bare step": [], "train.py": []}
        for round_index in range(args.repeats):
            runs = [("bare step", bare), ("train.py", None)]
            for name, run in runs if round_index % 2 == 0 else runs[::-1]:
                record = (
                    run()
                    if run is not None
                    else train_py_run(args, cache_dir, Path(workdir), round_index)
                )
                results[name].append(record)
                rate = record["tokens"] / record["wall"]
                print(f"  round {round_index + 1} {name}: {rate:.0f} tok/s", file=sys.stderr)
    print_loop_table(args, results)
    print(f"\n# load average at the end: {load_average()}")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "results": results}, indent=2))


def print_loop_table(args, results: dict[str, list[dict]]) -> None:
    tokens = {name: {r["tokens"] for r in runs} for name, runs in results.items()}
    if len(tokens["bare step"] | tokens["train.py"]) != 1:
        print(f"# WARNING: the two trained on different tokens: {tokens}")
    loss = "plain" if args.plain_loss else "fused"
    bar = "off" if args.no_progress_bar else "on"
    print(
        f"\n## steps {args.warmup_steps + 1}-{args.steps}, {loss} loss, progress bar {bar}, "
        f"{torch.get_num_threads()} thread(s), train.py of {args.train_tree}"
    )
    print(
        "| loop | tokens/s (wall) | min–max | ÷ bare step | tokens per CPU-second | min–max "
        "| ÷ bare step |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    medians = {}
    for name, runs in results.items():
        cells = []
        for clock in ("wall", "cpu"):
            rates = [r["tokens"] / r[clock] for r in runs]
            medians[name, clock] = median = statistics.median(rates)
            ratio = median / medians["bare step", clock]
            cells.append(f"{median:.0f} | {min(rates):.0f}–{max(rates):.0f} | **{ratio:.3f}**")
        print(f"| {name} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
