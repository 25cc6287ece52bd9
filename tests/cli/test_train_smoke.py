"""debug=smoke: the README's quick start on Multi30k, then translate.py on its checkpoint; and
debug=fast_dev_run."""

import json

import pytest

from tests.helpers.commands import run_script, run_train
from tests.helpers.run_if import run_if


@pytest.mark.slow  # trains a tiny model on Multi30k (under a minute)
@run_if(multi30k=True)
def test_the_quick_start_trains_scores_and_translates(multi30k_dir, tmp_path):
    env = {"TRANSFORMER_NMT_CACHE": str(tmp_path / "cache")}  # a first run: the BPE too
    run_dir = tmp_path / "smoke"
    command = ["debug=smoke", "data=multi30k", f"data.data_dir={multi30k_dir}"]
    run_train([*command, f"hydra.run.dir={run_dir}"], cwd=tmp_path, env=env, timeout=600)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["model"]["norm"] == "pre"
    assert summary["metric_steps"]["val/bleu"] == summary["steps"]  # decoded at the end
    assert summary["metrics"]["val/ppl"] < 150  # it learns: an untrained model is near 2000
    assert (run_dir / "checkpoints" / "best.ckpt").is_file()
    result = run_script(
        "translate.py",
        f"ckpt_path={run_dir / 'checkpoints' / 'best.ckpt'}",
        stdin="A man rides a bike.\n",
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 1 and result.stdout.split()  # one German line


@pytest.mark.slow  # starts train.py
def test_fast_dev_run_runs_one_batch_of_each_and_writes_no_best_checkpoint(
    tiny_overrides, tmp_path
):
    run_dir = tmp_path / "run"
    run_train([*tiny_overrides, "debug=fast_dev_run", f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["status"], summary["steps"]) == ("finished", 1)
    assert not (run_dir / "checkpoints" / "best.ckpt").exists()
    assert "final evaluation at step 1:" in (run_dir / "train.log").read_text()
