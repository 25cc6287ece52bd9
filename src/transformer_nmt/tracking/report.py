"""Collect a Hydra multirun into a Markdown table laid out like the paper's Table 3, and a plot.

Each job directory of the sweep holds Hydra's ``.hydra/overrides.yaml`` and ``config.yaml``
(written when the job starts) and, once the run ends, the ``summary.json`` written by training
(see ``transformer_nmt.tracking.summary``) and ``attention/maps.npz``, the attention maps of its
last validation (``AttentionMaps``). A job without a summary is reported as missing, and so is a
job the sweep's ``multirun.yaml`` promises (Hydra's basic sweeper) that has not started yet, so
the command works on a sweep that is still running or partly failed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import yaml

from transformer_nmt.atomic import write_file_atomically, write_text_atomically
from transformer_nmt.tracking.summary import SUMMARY_FILE

DEV_PPL, DEV_BLEU = "val/ppl", "val/bleu"
ATTENTION_DIR = "report_attention"  # beside report.md: one attention panel per job
# A numeric swept value whose largest is this many times its smallest gets a log-scale axis.
LOG_AXIS_RATIO = 10

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
    directory: Path | None = None  # the job's directory, once it has started
    status: str = field(init=False)

    def __post_init__(self) -> None:
        self.status = "missing" if self.summary is None else self.summary.get("status", "finished")

    def metric(self, key: str) -> float | None:
        value = (self.summary or {}).get("metrics", {}).get(key)
        return None if value is None or not math.isfinite(value) else float(value)

    def model_value(self, key: str):
        return (self.summary or {}).get("model", {}).get(key)

    @cached_property
    def config(self) -> dict:
        """The job's composed config (``.hydra/config.yaml``); empty when unknown."""
        path = None if self.directory is None else self.directory / ".hydra" / "config.yaml"
        return (yaml.safe_load(path.read_text()) or {}) if path and path.is_file() else {}

    def bleu_sentences(self) -> str | None:
        """How many dev sentences the final evaluation's BLEU decoded: ``"32"``, ``"all"``, or
        None when the job's config does not say (or it computed no BLEU)."""
        final_eval = self.config.get("final_eval") or {}
        if not final_eval.get("bleu"):
            return None
        limit = final_eval.get("max_sentences")
        return "all" if limit is None else str(limit)

    @cached_property
    def attention(self):
        """(step, :class:`~transformer_nmt.evaluation.attention.SentenceMaps`) of the first
        sentence of the job's last validation, when it drew cross-attention; else None."""
        path = None if self.directory is None else self.directory / "attention" / "maps.npz"
        if path is None or not path.is_file():
            return None
        from transformer_nmt.evaluation.attention import load_attention_maps  # imports torch

        step, sentences = load_attention_maps(path)
        if not sentences or "cross" not in sentences[0].maps:
            return None
        return step, sentences[0]

    def attention_panel(self) -> str:
        """Where :func:`write_report` draws the job's attention panel, relative to report.md."""
        return f"{ATTENTION_DIR}/job_{self.name.replace('/', '_')}.png"


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
        runs.append(Run(str(job_dir.relative_to(sweep_dir)), overrides, summary, job_dir))
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
    """Table 3 layout: variant, model shape, train steps, PPL (dev), BLEU (dev), params ×10⁶;
    then, when any job drew attention maps, a column of attention panels (the images
    :func:`write_report` draws into ``report_attention/``), and a line saying how many dev
    sentences BLEU decoded."""
    with_attention = any(run.attention is not None for run in runs)
    header = ["variant", *(name for name, _ in MODEL_COLUMNS), "ε_ls", "warmup", "train steps"]
    header += ["PPL (dev)", "BLEU (dev)", "params ×10⁶", "status"]
    header += ["attention (last layer, mean over heads)"] if with_attention else []
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for run in runs:
        summary = run.summary or {}
        variant = variant_name(run, runs)
        row = [variant]
        row += [_cell(run.model_value(key)) for _, key in MODEL_COLUMNS]
        row += [_cell(summary.get("label_smoothing")), _cell(summary.get("warmup"))]
        row += [_cell(summary.get("steps"))]
        row += [_cell(run.metric(DEV_PPL), ".2f"), _cell(run.metric(DEV_BLEU), ".1f")]
        params = summary.get("params")
        row += [_cell(None if params is None else params / 1e6, ".1f"), run.status]
        if with_attention:
            row += [f"![{variant}]({run.attention_panel()})" if run.attention else "—"]
        lines.append("| " + " | ".join(row) + " |")
    bleu = bleu_sentences(runs)
    note = f"\nBLEU (dev) decoded {bleu} in each job.\n" if bleu else ""
    return "\n".join(lines) + "\n" + note


def variant_name(run: Run, runs: list[Run]) -> str:
    """The swept values of ``run`` (``model.n_heads=4``), or its job name when nothing varies."""
    return ", ".join(f"{key}={run.overrides.get(key, '—')}" for key in swept_keys(runs)) or run.name


def bleu_sentences(runs: list[Run]) -> str | None:
    """How many dev sentences the jobs' BLEU decoded (``"the first 32 dev sentences"``), from
    their configs; None when no job says."""
    counts = sorted({count for run in runs if (count := run.bleu_sentences()) is not None})
    phrases = [
        "all dev sentences" if c == "all" else f"the first {c} dev sentences" for c in counts
    ]
    return " or ".join(phrases) or None


def plot(runs: list[Run], out_file: Path, x_key: str | None = None, metric: str | None = None):
    """Write :func:`figure` as a PNG; returns ``out_file``."""
    drawn = figure(runs, x_key, metric)
    write_file_atomically(
        out_file, lambda handle: drawn.savefig(handle, format="png", dpi=120), binary=True
    )
    return out_file


def figure(runs: list[Run], x_key: str | None = None, metric: str | None = None):
    """The metrics against one swept value, one series per combination of the other swept
    values: BLEU and perplexity side by side (only ``metric`` if given; perplexity alone when no
    job has BLEU); below them one attention panel per job that drew one (the first validation
    sentence's cross-attention in the last decoder layer, mean over heads, at its last
    validation).

    A numeric axis (``model.n_heads``) draws lines in numeric order, on a log scale when its
    values span :data:`LOG_AXIS_RATIO` or more; a categorical one (``model=prenorm,postnorm``)
    draws points, side by side per series, its categories and the series in the table's (job)
    order. ``figure.axes``: the metric plots first, then the panels.
    """
    from matplotlib.figure import Figure  # not pyplot: leaves the caller's backend alone

    axes = swept_keys(runs)
    x_key = x_key or next(
        (key for key in axes if _all_numeric(runs, key)), axes[0] if axes else None
    )
    if metric is not None:
        metrics = [metric]
    elif any(run.metric(DEV_BLEU) is not None for run in runs):
        metrics = [DEV_BLEU, DEV_PPL]
    else:
        metrics = [DEV_PPL]
    panels = [run for run in runs if run.attention is not None]
    columns = min(len(panels), 5)
    rows = -(-len(panels) // columns) if panels else 0
    panel_height = 2.6
    drawn = Figure(figsize=(max(5.5 * len(metrics), 2.4 * columns), 4 + panel_height * rows))
    grid = drawn.add_gridspec(1 + rows, 1, height_ratios=[4] + [panel_height] * rows)
    plots = grid[0].subgridspec(1, len(metrics))
    for index, name in enumerate(metrics):
        ax = drawn.add_subplot(plots[0, index])
        _plot_metric(ax, runs, x_key, name, axes)
    if panels:
        cells = grid[1:].subgridspec(rows, columns)
        for index, run in enumerate(panels):
            row, column = divmod(index, columns)
            first = panels[row * columns].attention[1].tgt_tokens  # the row's labelled panel
            same_rows = column > 0 and run.attention[1].tgt_tokens == first
            _draw_panel(drawn.add_subplot(cells[row, column]), run, runs, not same_rows)
    drawn.tight_layout()
    return drawn


def _plot_metric(ax, runs: list[Run], x_key: str | None, metric: str, axes: list[str]) -> None:
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

    if x_key is not None and _all_numeric(runs, x_key):
        for label, points in series.items():
            points.sort(key=lambda p: float(p[0]))
            xs = [float(x) for x, _ in points]
            ax.plot(xs, [y for _, y in points], marker="o", label=label)
        values = sorted({float(run.overrides[x_key]) for run in runs if x_key in run.overrides})
        if values and values[0] > 0 and values[-1] / values[0] >= LOG_AXIS_RATIO:
            ax.set_xscale("log")
            ax.set_xticks(values, [f"{v:g}" for v in values])
            ax.minorticks_off()
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
    title = metric
    if metric == DEV_BLEU and (sentences := bleu_sentences(runs)):
        title = f"{metric} ({sentences})"
    missing = sum(run.metric(metric) is None for run in runs)
    ax.set_title(f"{title}, {missing} of {len(runs)} runs missing" if missing else title)
    if series:
        ax.legend(fontsize="small")
    ax.grid(alpha=0.3)


def _draw_panel(ax, run: Run, runs: list[Run], label_queries: bool = True) -> None:
    from transformer_nmt.evaluation.attention import draw_attention

    step, sentence = run.attention
    weights = sentence.maps["cross"][-1].mean(0)  # the last decoder layer, mean over heads
    title = f"{variant_name(run, runs)} @ step {step}"
    queries = sentence.tgt_tokens if label_queries else None
    draw_attention(ax, weights, queries, sentence.src_tokens, title, weights.max())


def write_report(sweep_dir: Path, out_dir: Path | None = None, x_key: str | None = None):
    """Write report.md, report.png and, for jobs with attention maps, their panels
    (``report_attention/job_<name>.png``) for the sweep; returns the paths of the first two."""
    runs = load_sweep(sweep_dir)
    out_dir = out_dir or sweep_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    for run in runs:
        if run.attention is not None:
            _plot_panel(run, runs, out_dir / run.attention_panel())
    table_file = out_dir / "report.md"
    write_text_atomically(table_file, ablation_table(runs))
    plot_file = plot(runs, out_dir / "report.png", x_key)
    return table_file, plot_file


def _plot_panel(run: Run, runs: list[Run], out_file: Path) -> None:
    from matplotlib.figure import Figure

    drawn = Figure(figsize=(3.2, 3.0))
    _draw_panel(drawn.subplots(), run, runs)
    drawn.tight_layout()
    write_file_atomically(
        out_file, lambda handle: drawn.savefig(handle, format="png", dpi=120), binary=True
    )


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
