"""Each CPU benchmark script runs with its smallest settings and prints its one table with the
rows it promises."""

import pytest

from tests.helpers.commands import run_script
from tests.helpers.run_if import run_if


def table(stdout: str) -> list[list[str]]:
    """The printed Markdown table's rows (header and rule left out), as lists of cells."""
    lines = [line for line in stdout.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def run_benchmark(script: str, *args: str) -> list[list[str]]:
    done = run_script(f"benchmarks/{script}", "--quick", *args, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("\n## ") + done.stdout.startswith("## ") == 1  # one table
    assert "torch " in done.stdout  # its machine line
    return table(done.stdout)


@pytest.mark.slow
def test_train_step_times_ours_against_marian_and_nn_transformer():
    rows = run_benchmark("bench_train_step.py")
    names = ["ours (sdpa)", "ours (manual attention)", "HF Marian", "nn.Transformer"]
    assert [(row[0], row[1]) for row in rows] == [("small", name) for name in names]
    assert rows[0][-1] == "**1.00**"
    assert all(float(row[2]) > 0 for row in rows)


@pytest.mark.slow
def test_loss_times_plain_and_fused_and_the_fused_call_needs_less_memory():
    rows = run_benchmark("bench_loss.py")
    assert [(row[0], row[3]) for row in rows] == [
        ("head", "plain"), ("head", "fused"), ("step", "plain"), ("step", "fused"),
    ]  # fmt: skip
    plain, fused = (float(row[-1]) for row in rows[:2])
    assert fused < plain / 2  # the head's [N, V] tensors are what the fused loss avoids


@pytest.mark.slow
def test_gpu_script_runs_its_step_on_the_cpu():
    rows = run_benchmark("bench_gpu.py")
    assert [row[0] for row in rows] == ["eager", "eager_host_read"]
    assert all(float(row[3]) > 0 for row in rows)  # model TFLOP/s


@pytest.mark.slow
@run_if(multi30k=True)
def test_loop_compares_train_py_with_the_bare_step():
    rows = {row[0]: row for row in run_benchmark("bench_loop.py")}
    assert list(rows) == ["bare step", "train.py"]
    assert rows["bare step"][-1] == "**1.000**"
    assert float(rows["train.py"][1].replace(",", "")) > 0


@pytest.mark.slow
@run_if(multi30k=True)
def test_decoding_times_every_engine_and_ct2_float32_greedy_equals_ours(tmp_path):
    options = ["--beams", "1", "--work-dir", str(tmp_path)]  # greedy, at batch 1 and 64
    rows = {row[0]: row for row in run_benchmark("bench_decoding.py", *options)}
    searches = ["greedy, 1", "greedy, 64"]
    assert list(rows) == [*searches, "process start (empty input)"]
    for search in searches:
        assert all(float(cell.replace(",", "")) > 0 for cell in rows[search][1:8])
    for greedy in searches:
        ct2_same = rows[greedy][-1].split(" · ")[1]
        assert ct2_same == "16 of 16"  # CTranslate2 float32 decodes our greedy outputs


@pytest.mark.slow
def test_data_pipeline_reads_the_second_rank_with_its_workers(tmp_path):
    rows = run_benchmark("bench_data_pipeline.py", "--work-dir", str(tmp_path))
    assert [row[0] for row in rows] == ["20,000"]
    cold_s, prep_gib, warm_s, *gib = (float(cell) for cell in rows[0][1:])
    assert cold_s > 0 and warm_s > 0 and prep_gib > 0
    assert all(value > 0 for value in gib)
