"""The sweep report: jobs read from a sweep directory, the markdown table, report.py."""

import json

import pytest
import yaml

from tests.helpers.commands import run_script
from transformer_nmt.tracking.report import ablation_table, figure, load_sweep, swept_keys


def make_job(sweep, name, overrides, summary=None):
    job = sweep / name
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    if summary is not None:
        (job / "summary.json").write_text(json.dumps(summary))


def summary(n_heads, bleu, ppl):
    return {
        "status": "finished",
        "model": {
            "n_encoder_layers": 2,
            "d_model": 64,
            "d_ff": 128,
            "n_heads": n_heads,
            "d_k": 64 // n_heads,
            "d_v": 64 // n_heads,
            "dropout": 0.1,
            "norm": "post",
            "positional": "sinusoidal",
        },
        "label_smoothing": 0.1,
        "warmup": 400,
        "params": 1_234_567,
        "steps": 100,
        "metrics": {"val/ppl": ppl, "val/bleu": bleu},
    }


@pytest.fixture
def sweep(tmp_path):
    for i, (heads, norm) in enumerate([(1, "post"), (4, "post"), (1, "pre"), (4, "pre")]):
        overrides = [f"model.n_heads={heads}", f"model.norm={norm}", "trainer.max_steps=100"]
        done = summary(heads, bleu=10.0 + heads, ppl=20.0 / heads) if i != 3 else None
        make_job(tmp_path, str(i), overrides, done)
    make_job(
        tmp_path,
        "10",
        ["model.n_heads=8", "model.norm=post", "trainer.max_steps=100"],
        summary(8, bleu=15.0, ppl=3.0),
    )
    return tmp_path


def test_sweep_axes_and_natural_job_order(sweep):
    runs = load_sweep(sweep)
    assert [run.name for run in runs] == ["0", "1", "2", "3", "10"]
    assert swept_keys(runs) == ["model.n_heads", "model.norm"]


def test_table_has_paper_columns_and_marks_missing_runs(sweep):
    table = ablation_table(load_sweep(sweep)).splitlines()
    assert "PPL (dev)" in table[0] and "BLEU (dev)" in table[0] and "params ×10⁶" in table[0]
    assert len(table) == 2 + 5
    row_1 = next(line for line in table if "model.n_heads=4, model.norm=post" in line)
    assert "| 14.0 |" in row_1 and "| 5.00 |" in row_1 and "| 1.2 |" in row_1
    assert "| 16 |" in row_1  # d_k = 64 / 4
    missing = next(line for line in table if "model.n_heads=4, model.norm=pre" in line)
    assert missing.rstrip().endswith("missing |")
    assert "trainer.max_steps" not in "\n".join(table)  # not swept, so not part of the variant


def test_plot_draws_categories_as_points_in_the_tables_order(tmp_path):
    jobs = [("sinusoidal", 1), ("learned", 1), ("sinusoidal", 4), ("learned", 4)]  # not sorted
    for i, (positional, heads) in enumerate(jobs):
        overrides = [f"model.positional={positional}", f"model.n_heads={heads}"]
        make_job(tmp_path, str(i), overrides, summary(heads, bleu=10.0 + i, ppl=5.0))
    runs = load_sweep(tmp_path)
    ax = figure(runs, x_key="model.positional").axes[0]
    assert [label.get_text() for label in ax.get_xticklabels()] == ["sinusoidal", "learned"]
    assert [line.get_linestyle() for line in ax.get_lines()] == ["None", "None"]  # no lines
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert legend == ["model.n_heads=1", "model.n_heads=4"]
    (heads_1, heads_4) = ax.get_lines()
    assert list(heads_1.get_ydata()) == [10.0, 11.0] and list(heads_4.get_ydata()) == [12.0, 13.0]
    assert heads_1.get_xdata()[0] < heads_4.get_xdata()[0] < 0.5 < heads_1.get_xdata()[1]
    numeric = figure(runs).axes[0]  # model.n_heads: a line per positional, in numeric order
    assert [line.get_linestyle() for line in numeric.get_lines()] == ["-", "-"]
    assert list(numeric.get_lines()[0].get_xdata()) == [1.0, 4.0]


@pytest.mark.slow  # starts report.py
def test_report_command_writes_table_and_png(sweep, tmp_path):
    out = tmp_path / "report"
    result = run_script("report.py", str(sweep), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "BLEU (dev)" in result.stdout
    assert (out / "report.md").read_text() == ablation_table(load_sweep(sweep))
    png = (out / "report.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000
    assert not list(out.glob(".*tmp"))


@pytest.mark.slow  # starts report.py
def test_empty_directory_is_a_clear_error(tmp_path):
    result = run_script("report.py", str(tmp_path))
    assert result.returncode == 2
    assert "no Hydra jobs" in result.stderr and str(tmp_path) in result.stderr


def test_jobs_the_sweep_has_not_started_yet_are_listed_as_missing(tmp_path):
    multirun = {
        "hydra": {
            "sweeper": {
                "_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
                "params": {"model.n_heads": "1,4"},
            },
            "overrides": {"task": ["model.norm=post,pre", "trainer.max_steps=100"]},
        }
    }
    (tmp_path / "multirun.yaml").write_text(yaml.safe_dump(multirun))
    done = ["model.n_heads=1", "model.norm=post", "trainer.max_steps=100", "~callbacks.samples"]
    make_job(tmp_path, "0", done[:3], summary(1, bleu=10.0, ppl=20.0))
    runs = load_sweep(tmp_path)
    assert [(run.name, run.status) for run in runs] == [
        ("0", "finished"), ("1", "missing"), ("2", "missing"), ("3", "missing"),
    ]  # fmt: skip
    assert runs[3].overrides == {
        "model.n_heads": "4", "model.norm": "pre", "trainer.max_steps": "100",
    }  # fmt: skip
    make_job(tmp_path, "1", done)  # a deletion override (no "=") is read, not a crash
    assert load_sweep(tmp_path)[1].overrides["~callbacks.samples"] == ""
