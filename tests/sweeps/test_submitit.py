"""``hydra/launcher=local``: a sweep's jobs run as submitit subprocesses, as on SLURM."""

import json
import os

import pytest

from tests.helpers.commands import run_train
from tests.helpers.tiny_runs import ablation_overrides


@pytest.mark.slow  # a sweep of two submitit processes
def test_submitit_local_launcher_runs_each_job_in_its_own_process(tiny_overrides, tmp_path):
    sweep_dir = tmp_path / "sweep"
    run_train(
        ["-m", "hydra/launcher=local", "ablation=positional", "experiment=multi30k_base"]
        + ablation_overrides(tiny_overrides)
        + ["trainer.max_steps=4", "final_eval.bleu=false", f"hydra.sweep.dir={sweep_dir}"],
        cwd=tmp_path,
    )
    submitit_dir = sweep_dir / ".submitit"  # <job id>/ per job (%j/ holds the submission)
    submitit_jobs = sorted(p for p in submitit_dir.iterdir() if p.name.isdigit())
    assert len(submitit_jobs) == 2  # one submitit job (a process id, locally) per Hydra job
    assert all(int(job.name) != os.getpid() for job in submitit_jobs)
    for job in submitit_jobs:
        assert list(job.glob("*_result.pkl")), f"submitit job {job.name} left no result"
        log = "".join(p.read_text() for p in job.glob("*_log.*"))
        assert "rank 0 of 1 finished at step 4" in log
    for number, positional in (("0", "sinusoidal"), ("1", "learned")):
        summary = json.loads((sweep_dir / number / "summary.json").read_text())
        assert (summary["status"], summary["steps"]) == ("finished", 4)
        assert summary["model"]["positional"] == positional
        assert summary["metrics"]["test/ppl"] is not None
