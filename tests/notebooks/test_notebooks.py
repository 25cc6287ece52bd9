"""The notebooks run top to bottom (nbclient) on a checkpoint and a sweep the tests train;
they are committed executed, with their outputs, and read the README's runs by default.
"""

import re

import nbformat
import pytest
from nbclient import NotebookClient

from tests.helpers import REPO_ROOT

NOTEBOOKS = REPO_ROOT / "notebooks"


def execute(name: str, monkeypatch, **env: str):
    for key, value in env.items():
        monkeypatch.setenv(key, value)  # the kernel inherits this process's environment
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": NOTEBOOKS}}
    ).execute()  # raises CellExecutionError, with the cell and traceback, if a cell fails
    return notebook


def outputs(notebook, output_type: str | None = None) -> list:
    found = [out for cell in notebook.cells for out in cell.get("outputs", [])]
    return [out for out in found if output_type is None or out["output_type"] == output_type]


def images(notebook) -> list:
    return [out for out in outputs(notebook) if "image/png" in out.get("data", {})]


FIGURES = {"attention_maps.ipynb": 3, "ablations.ipynb": 2}


@pytest.mark.parametrize("name", FIGURES)
def test_notebooks_are_committed_run_top_to_bottom_with_their_outputs(name):
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1))
    assert not outputs(notebook, "error") and len(images(notebook)) == FIGURES[name]
    texts = [out.get("text", "") for out in outputs(notebook, "stream")] + [
        "".join(out["data"].get(kind, "")) for out in outputs(notebook) if "data" in out
        for kind in ("text/plain", "text/markdown")
    ]  # fmt: skip
    assert not re.search(r"(^|[\s'\"(])/\w", "\n".join(texts))  # no absolute path of where it ran


def test_notebooks_read_the_readme_runs_by_default():
    readme = (REPO_ROOT / "README.md").read_text()
    run_dir = re.search(r"python train\.py debug=smoke .*hydra\.run\.dir=(\S+)", readme)[1]
    sweep = re.search(r"python train\.py -m debug=smoke [^`]*?hydra\.sweep\.dir=(\S+)", readme)
    sweep_dir = sweep[1]
    defaults = {
        "attention_maps.ipynb": f'"../{run_dir}/checkpoints/best.ckpt"',
        "ablations.ipynb": f'"../{sweep_dir}"',
    }
    for name, default in defaults.items():
        first_cell = next(
            c for c in nbformat.read(NOTEBOOKS / name, 4).cells if c.cell_type == "code"
        )
        assert default in first_cell.source, name


@pytest.mark.slow  # runs a kernel, on the sweep's checkpoint
def test_attention_maps_plots_encoder_decoder_and_cross_attention(tiny_sweep, monkeypatch):
    checkpoint = tiny_sweep / "1" / "checkpoints" / "best.ckpt"  # pre-norm, 1 layer, 2 heads
    notebook = execute("attention_maps.ipynb", monkeypatch, CKPT_PATH=str(checkpoint))
    text = "".join(out.get("text", "") for out in outputs(notebook, "stream"))
    assert "translation:" in text
    assert len(images(notebook)) == 3  # encoder self, decoder self, cross: one figure each
    shapes = next(o for o in outputs(notebook, "execute_result"))["data"]["text/plain"]
    assert "'decoder.layers.0.cross_attention': (1, 2," in shapes


@pytest.mark.slow  # runs a kernel, on the sweep
def test_ablations_renders_the_report_and_plots_it(tiny_sweep, monkeypatch, tmp_path):
    notebook = execute(
        "ablations.ipynb", monkeypatch, SWEEP_DIR=str(tiny_sweep), REPORT_DIR=str(tmp_path)
    )
    markdown = [out["data"]["text/markdown"] for out in outputs(notebook, "display_data")
                if "text/markdown" in out["data"]]  # fmt: skip
    assert len(markdown) == 1 and "| model.norm=pre |" in markdown[0]
    assert (tmp_path / "report.md").is_file() and (tmp_path / "report.png").is_file()
    assert len(images(notebook)) == 2  # the report's plot and the per-variant bars
