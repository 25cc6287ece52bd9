"""The sweep report: jobs read from a sweep directory, the markdown table, the plot (BLEU and
perplexity, a log axis for h = 1 … 32, one attention panel per job), report.py."""

import json

import numpy as np
import pytest
import yaml

from tests.helpers.commands import run_script
from transformer_nmt.evaluation.attention import (
    SentenceMaps,
    load_attention_maps,
    save_attention_maps,
)
from transformer_nmt.tracking.report import (
    ablation_table,
    figure,
    load_sweep,
    swept_keys,
    write_report,
)


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


def heads_sweep(root, heads=(1, 4, 8, 16, 32), max_sentences=32, with_maps=(1,)):
    """A Table 3 (A) sweep: one finished job per h, each with its config; the jobs in
    ``with_maps`` also with the attention maps of their last validation (step 100)."""
    for i, h in enumerate(heads):
        make_job(root, str(i), [f"model.n_heads={h}"], summary(h, bleu=10.0 + h, ppl=40.0 / h))
        config = {"final_eval": {"bleu": True, "max_sentences": max_sentences}}
        (root / str(i) / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
        if i in with_maps:
            cross = np.random.default_rng(i).dirichlet(np.ones(4), size=(2, h, 3))  # [N, h, T, S]
            sentences = [SentenceMaps(["a", "b", "c", "</s>"], ["<s>", "x", "y"], {"cross": cross})]
            save_attention_maps(root / str(i) / "attention" / "maps.npz", 100, sentences)
    return load_sweep(root)


def test_heads_from_1_to_32_plot_on_a_log_axis_with_perplexity_beside_bleu(tmp_path):
    runs = heads_sweep(tmp_path, with_maps=())
    bleu, ppl = figure(runs).axes
    assert bleu.get_xscale() == "log" and ppl.get_xscale() == "log"
    assert [label.get_text() for label in bleu.get_xticklabels()] == ["1", "4", "8", "16", "32"]
    assert bleu.get_title() == "val/bleu (the first 32 dev sentences)"
    assert ppl.get_title() == "val/ppl"
    assert list(ppl.get_lines()[0].get_ydata()) == [40.0, 10.0, 5.0, 2.5, 1.25]
    narrow = figure(heads_sweep(tmp_path / "narrow", heads=(4, 8), with_maps=())).axes[0]
    assert narrow.get_xscale() == "linear"  # 4 to 8: no order of magnitude


def test_the_table_says_how_many_sentences_bleu_decoded(tmp_path):
    table = ablation_table(heads_sweep(tmp_path, with_maps=()))
    assert table.endswith("\nBLEU (dev) decoded the first 32 dev sentences in each job.\n")
    everything = ablation_table(heads_sweep(tmp_path / "all", max_sentences=None, with_maps=()))
    assert everything.endswith("\nBLEU (dev) decoded all dev sentences in each job.\n")
    assert "attention" not in everything  # no job drew attention maps


def test_each_job_with_attention_maps_gets_a_panel_beside_the_table_and_in_the_plot(tmp_path):
    runs = heads_sweep(tmp_path / "sweep", with_maps=(1, 3))
    table = ablation_table(runs).splitlines()
    assert table[0].endswith("| attention (last layer, mean over heads) |")
    h4 = next(line for line in table if line.startswith("| model.n_heads=4 |"))
    assert h4.endswith("| ![model.n_heads=4](report_attention/job_1.png) |")
    assert next(line for line in table if line.startswith("| model.n_heads=1 |")).endswith("| — |")
    drawn = figure(runs)
    bleu, ppl, panel_1, panel_3 = drawn.axes  # the metrics, then one panel per job with maps
    assert panel_3.get_title() == "model.n_heads=16 @ step 100"
    expected = load_attention_maps(tmp_path / "sweep" / "3" / "attention" / "maps.npz")[1][0]
    shown = panel_3.get_images()[0].get_array()
    np.testing.assert_allclose(shown, expected.maps["cross"][-1].mean(0))  # last layer, mean
    assert [t.get_text() for t in panel_3.get_xticklabels()] == ["a", "b", "c", "</s>"]
    assert [t.get_text() for t in panel_1.get_yticklabels()] == ["<s>", "x", "y"]
    assert not panel_3.get_yticklabels()  # the same target as the row's first panel: once
    table_file, plot_file = write_report(tmp_path / "sweep", tmp_path / "out")
    assert table_file.read_text() == "\n".join(table) + "\n"
    panels = sorted(p.name for p in (tmp_path / "out" / "report_attention").iterdir())
    assert panels == ["job_1.png", "job_3.png"]
    assert (tmp_path / "out" / "report_attention" / "job_3.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow  # reads the sweep's runs
def test_a_real_sweeps_report_shows_each_jobs_attention(tiny_sweep, tmp_path):
    table_file, _ = write_report(tiny_sweep, tmp_path)
    table = table_file.read_text()
    assert "| ![model.norm=post](report_attention/job_0.png) |" in table
    assert "| ![model.norm=pre](report_attention/job_1.png) |" in table
    post, pre = (load_sweep(tiny_sweep)[i].attention for i in (0, 1))
    assert post[0] == pre[0] == 8  # the last validation's maps
    assert post[1].src_tokens == pre[1].src_tokens  # the same sentence in every job
    assert len(figure(load_sweep(tiny_sweep)).axes) == 2 + 2  # BLEU, PPL, two panels
