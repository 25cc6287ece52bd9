"""Collect a Hydra multirun into a Markdown table laid out like the paper's Table 3, and a plot.

Each job directory of the sweep holds Hydra's ``.hydra/overrides.yaml`` (written when the job
starts) and, once the run ends, the ``summary.json`` written by training (see
``transformer_nmt.tracking.summary``). A job without a summary is reported as missing, and so is
a job the sweep's ``multirun.yaml`` promises (Hydra's basic sweeper) that has not started yet, so
the command works on a sweep that is still running or partly failed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from transformer_nmt.atomic import write_file_atomically, write_text_atomically
from transformer_nmt.tracking.summary import SUMMARY_FILE

DEV_PPL, DEV_BLEU = "val/ppl", "val/bleu"

# (column heading, key in the summary's model config) — the paper's Table 3 columns.
MODEL_COLUMNS = [
    ("N", "n_encoder_layers"),
    ("d_model", "d_model"),
    ("d_ff", "d_ff"),
    ("h", "n_heads"),
    ("d_k", "d_k"),
    ("d_v", "d_v"),
    ("P_drop", "dropout"),
    ("norm", "norm"),
    ("positional", "positional"),
]


@dataclass
class Run:
    """One job of the sweep: its overrides and, if it finished, its summary."""

    name: str
    overrides: dict[str, str]
    summary: dict | None = None
    status: str = field(init=False)

    def __post_init__(self) -> None:
        self.status = "missing" if self.summary is None else self.summary.get("status", "finished")

    def metric(self, key: str) -> float | None:
        value = (self.summary or {}).get("metrics", {}).get(key)
        return None if value is None or not math.isfinite(value) else float(value)

    def model_value(self, key: str):
        return (self.summary or {}).get("model", {}).get(key)


def load_sweep(sweep_dir: Path) -> list[Run]:
    """Every job directory under sweep_dir (those with .hydra/overrides.yaml), in job order."""
    if not sweep_dir.is_dir():
        raise FileNotFoundError(f"sweep directory {sweep_dir} does not exist")
    runs = []
    for overrides_file in sweep_dir.glob("**/.hydra/overrides.yaml"):
        job_dir = overrides_file.parent.parent
        overrides = _override_dict(yaml.safe_load(overrides_file.read_text()) or [])
        summary_file = job_dir / SUMMARY_FILE
        summary = json.loads(summary_file.read_text()) if summary_file.exists() else None
        runs.append(Run(str(job_dir.relative_to(sweep_dir)), overrides, summary))
    if not runs:
        raise FileNotFoundError(
            f"no Hydra jobs under {sweep_dir} (expected <job>/.hydra/overrides.yaml); "
            f"pass the directory of a `python train.py -m ...` sweep"
        )
    started = [run.overrides for run in runs]
    for number, overrides in enumerate(expected_jobs(sweep_dir) or []):
        if overrides not in started:
            runs.append(Run(str(number), overrides))
    return sorted(runs, key=lambda run: _natural_key(run.name))


def expected_jobs(sweep_dir: Path) -> list[dict[str, str]] | None:
    """The overrides of every job the sweep launches, expanded from its ``multirun.yaml`` as
    Hydra's basic sweeper does; None when that is unknown (another sweeper, no file).
    """
    path = sweep_dir / "multirun.yaml"
    if not path.is_file():
        return None
    hydra = (yaml.safe_load(path.read_text()) or {}).get("hydra") or {}
    sweeper = hydra.get("sweeper") or {}
    if not str(sweeper.get("_target_", "")).endswith("basic_sweeper.BasicSweeper"):
        return None
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from transformer_nmt.private_api import basic_sweeper_jobs

    arguments = [f"{key}={value}" for key, value in (sweeper.get("params") or {}).items()]
    arguments += list((hydra.get("overrides") or {}).get("task") or [])
    try:
        parsed = OverridesParser.create().parse_overrides(arguments)
        jobs = basic_sweeper_jobs(parsed)
    except HydraException:
        return None
    return [_override_dict(job) for job in jobs]


def swept_keys(runs: list[Run]) -> list[str]:
    """Override keys whose value differs between runs: the sweep's axes."""
    keys = sorted({key for run in runs for key in run.overrides})
    return [key for key in keys if len({run.overrides.get(key) for run in runs}) > 1]


def ablation_table(runs: list[Run]) -> str:
    """Table 3 layout: variant, model shape, train steps, PPL (dev), BLEU (dev), params ×10⁶."""
    axes = swept_keys(runs)
    header = ["variant", *(name for name, _ in MODEL_COLUMNS), "ε_ls", "warmup", "train steps"]
    header += ["PPL (dev)", "BLEU (dev)", "params ×10⁶", "status"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for run in runs:
        summary = run.summary or {}
        variant = ", ".join(f"{key}={run.overrides.get(key, '—')}" for key in axes) or run.name
        row = [variant]
        row += [_cell(run.model_value(key)) for _, key in MODEL_COLUMNS]
        row += [_cell(summary.get("label_smoothing")), _cell(summary.get("warmup"))]
        row += [_cell(summary.get("steps"))]
        row += [_cell(run.metric(DEV_PPL), ".2f"), _cell(run.metric(DEV_BLEU), ".1f")]
        params = summary.get("params")
        row += [_cell(None if params is None else params / 1e6, ".1f"), run.status]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def plot(runs: list[Run], out_file: Path, x_key: str | None = None, metric: str | None = None):
    """Write :func:`figure` as a PNG; returns ``out_file``."""
    drawn = figure(runs, x_key, metric)
    write_file_atomically(
        out_file, lambda handle: drawn.savefig(handle, format="png", dpi=120), binary=True
    )
    return out_file


def figure(runs: list[Run], x_key: str | None = None, metric: str | None = None):
    """The metric against one swept value, one series per combination of the other swept values.

    A numeric axis (``model.n_heads``) draws lines in numeric order; a categorical one
    (``model=prenorm,postnorm``) draws points, side by side per series, its categories and the
    series in the table's (job) order.
    """
    from matplotlib.figure import Figure  # not pyplot: leaves the caller's backend alone

    axes = swept_keys(runs)
    x_key = x_key or next(
        (key for key in axes if _all_numeric(runs, key)), axes[0] if axes else None
    )
    if metric is None:
        metric = DEV_BLEU if any(run.metric(DEV_BLEU) is not None for run in runs) else DEV_PPL
    categories: list[str] = []  # x values in table order
    series: dict[str, list[tuple[str, float]]] = {}  # label -> points, in table order
    for run in runs:
        x = run.overrides.get(x_key, run.name) if x_key else run.name
        if x not in categories:
            categories.append(x)
        value = run.metric(metric)
        if value is None:
            continue
        label = ", ".join(f"{k}={run.overrides.get(k)}" for k in axes if k != x_key) or metric
        series.setdefault(label, []).append((x, value))

    drawn = Figure(figsize=(6, 4))
    ax = drawn.subplots()
    if x_key is not None and _all_numeric(runs, x_key):
        for label, points in series.items():
            points.sort(key=lambda p: float(p[0]))
            xs = [float(x) for x, _ in points]
            ax.plot(xs, [y for _, y in points], marker="o", label=label)
    else:
        spread = 0.3 / max(len(series) - 1, 1)  # series side by side within a category
        for index, (label, points) in enumerate(series.items()):
            shift = (index - (len(series) - 1) / 2) * spread if len(series) > 1 else 0.0
            xs = [categories.index(x) + shift for x, _ in points]
            ax.plot(xs, [y for _, y in points], marker="o", linestyle="none", label=label)
        ax.set_xticks(range(len(categories)), categories)
        ax.set_xlim(-0.5, len(categories) - 0.5)
    ax.set_xlabel(x_key or "run")
    ax.set_ylabel(metric)
    missing = sum(run.metric(metric) is None for run in runs)
    ax.set_title(f"{metric} ({missing} of {len(runs)} runs missing)" if missing else metric)
    if series:
        ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    drawn.tight_layout()
    return drawn


def write_report(sweep_dir: Path, out_dir: Path | None = None, x_key: str | None = None):
    """Write report.md and report.png for the sweep; returns their paths."""
    runs = load_sweep(sweep_dir)
    out_dir = out_dir or sweep_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    table_file = out_dir / "report.md"
    write_text_atomically(table_file, ablation_table(runs))
    plot_file = plot(runs, out_dir / "report.png", x_key)
    return table_file, plot_file


def _override_dict(overrides: list[str]) -> dict[str, str]:
    """``{"model.n_heads": "4"}`` from ``["model.n_heads=4"]`` (``~key`` deletions map to "")."""
    return dict(item.split("=", 1) if "=" in item else (item, "") for item in overrides)


def _cell(value, spec: str = "") -> str:
    if value is None:
        return "—"
    return format(value, spec) if spec else str(value)


def _all_numeric(runs: list[Run], key: str) -> bool:
    try:
        for run in runs:
            float(run.overrides.get(key, "nan"))
    except ValueError:
        return False
    return True


def _natural_key(name: str):
    return [int(part) if part.isdigit() else part for part in Path(name).parts]
