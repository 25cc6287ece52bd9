"""The table of an evaluate sweep, from job directories as Hydra and evaluate.py leave them."""

import json

from hydra.types import RunMode
from omegaconf import OmegaConf

from transformer_nmt.evaluation.score_table import ScoreTable, load_scored_jobs, markdown_table


def _job(sweep, number, overrides, scores=None):
    hydra_dir = sweep / str(number) / ".hydra"
    hydra_dir.mkdir(parents=True)
    (hydra_dir / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    if scores is not None:
        split = scores["split"]
        (sweep / str(number) / f"scores.{split}.json").write_text(json.dumps(scores))


def _scores(bleu, bp, split="val"):
    return dict(split=split, bleu=bleu, brevity_penalty=bp, length_ratio=bp, chrf=50.0,
                n_sentences=3)  # fmt: skip


def test_rows_follow_job_order_show_only_swept_keys_and_mark_the_best(tmp_path):
    shared = "ckpt_path=a.ckpt"
    for number, alpha, bleu in [(10, 1.2, 30.0), (2, 0.6, 31.5), (0, 0.0, 29.0)]:
        _job(tmp_path, number, [shared, f"search.length_penalty={alpha}"], _scores(bleu, 0.9))
    _job(tmp_path, 11, [shared, "search.length_penalty=1.5"])  # failed before scoring

    jobs = load_scored_jobs(tmp_path)
    assert [job.job for job in jobs] == ["0", "2", "10", "11"]  # numeric, not string, order
    lines = markdown_table(jobs).splitlines()
    assert (
        lines[0]
        == "| search.length_penalty | split | BLEU | BP | length ratio | chrF | sentences |"
    )
    assert lines[2].startswith("| 0.0 | val | 29.00 | 0.900 |")
    assert lines[3].startswith("| 0.6 | val | **31.50** |")  # the best BLEU, once
    assert markdown_table(jobs).count("**") == 2
    assert lines[5].startswith("| 1.5 | — | no scores")


def test_each_split_marks_its_own_best(tmp_path):
    for number, split, bleu in [(0, "val", 30.0), (1, "test", 20.0), (2, "val", 25.0)]:
        _job(tmp_path, number, [f"split={split}"], _scores(bleu, 1.0, split))
    table = markdown_table(load_scored_jobs(tmp_path))
    assert "**30.00**" in table and "**20.00**" in table and "**25.00**" not in table


def test_the_table_is_rewritten_after_every_job_of_a_multirun(tmp_path):
    """A failed job ends a Hydra sweep before on_multirun_end: the table must already be there."""
    sweep = tmp_path / "sweep"

    def job_end_config(mode):
        hydra = {"mode": mode, "sweep": {"dir": str(sweep)}, "runtime": {"cwd": str(tmp_path)}}
        return OmegaConf.create({"hydra": hydra})

    _job(sweep, 0, ["search.length_penalty=0.6"], _scores(31.0, 0.95))
    ScoreTable().on_job_end(job_end_config(RunMode.MULTIRUN), job_return=None)
    assert "**31.00**" in (sweep / "scores.md").read_text()
    _job(sweep, 1, ["search.length_penalty=1.0"])  # this job failed
    ScoreTable().on_job_end(job_end_config(RunMode.MULTIRUN), job_return=None)
    lines = (sweep / "scores.md").read_text().splitlines()
    assert lines[2].startswith("| 0.6 | val | **31.00** |")
    assert lines[3].startswith("| 1.0 | — | no scores")

    (sweep / "scores.md").unlink()
    ScoreTable().on_job_end(job_end_config(RunMode.RUN), job_return=None)
    assert not (sweep / "scores.md").exists()  # a single run writes no sweep table
