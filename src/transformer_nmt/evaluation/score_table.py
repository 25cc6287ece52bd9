"""The scores of a ``python evaluate.py -m`` sweep side by side: one row per job.

    python evaluate.py -m ckpt_path=avg5.ckpt split=val search.length_penalty=0,0.4,0.6,0.8,1,1.2

When the last job ends, :class:`ScoreTable` prints a Markdown table of the values the sweep
varies beside each job's BLEU, brevity penalty, length ratio and chrF, marks the best BLEU, and
writes the table to ``<sweep dir>/scores.md`` (kept up to date after every job, so a sweep with a
failed job still leaves it). Tune decoding on ``val``, never on ``test``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hydra.experimental.callback import Callback
from hydra.types import RunMode

from transformer_nmt.atomic import write_text_atomically
from transformer_nmt.tracking.overrides import override_values, sweep_dir_of

TABLE_FILE = "scores.md"


@dataclass(frozen=True)
class ScoredJob:
    """One job of the sweep: its overrides and, once it has scored a split, its scores."""

    job: str
    overrides: dict[str, Any]
    scores: dict | None  # the job's scores.<split>.json; None if it wrote none


def load_scored_jobs(sweep_dir: Path) -> list[ScoredJob]:
    """Every job under ``sweep_dir`` (``<job>/.hydra/overrides.yaml``) and each split it scored,
    in job order."""
    jobs = []
    for overrides_file in sweep_dir.glob("*/.hydra/overrides.yaml"):
        job_dir = overrides_file.parent.parent
        overrides = override_values(yaml.safe_load(overrides_file.read_text()) or [])
        score_files = sorted(job_dir.glob("scores.*.json"))
        for score_file in score_files:
            jobs.append(ScoredJob(job_dir.name, overrides, json.loads(score_file.read_text())))
        if not score_files:
            jobs.append(ScoredJob(job_dir.name, overrides, None))
    return sorted(
        jobs,
        key=lambda job: (
            not job.job.isdigit(),
            int(job.job) if job.job.isdigit() else 0,
            job.job,
        ),
    )


def markdown_table(jobs: list[ScoredJob]) -> str:
    """The swept values, then split, BLEU, BP, length ratio and chrF; each split's best BLEU in
    bold."""
    keys = sorted({key for job in jobs for key in job.overrides})
    swept = [k for k in keys if len({repr(job.overrides.get(k)) for job in jobs}) > 1]
    best: dict[str, float] = {}  # split -> its best BLEU
    for job in jobs:
        if job.scores:
            split = job.scores["split"]
            best[split] = max(best.get(split, job.scores["bleu"]), job.scores["bleu"])
    header = [*swept, "split", "BLEU", "BP", "length ratio", "chrF", "sentences"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for job in jobs:
        row = [str(job.overrides.get(key, "—")) for key in swept]
        if job.scores is None:
            row += ["—", "no scores (the job failed or is still running)", "", "", "", ""]
        else:
            s = job.scores
            bleu = f"{s['bleu']:.2f}"
            row += [
                s["split"],
                f"**{bleu}**" if s["bleu"] == best[s["split"]] else bleu,
                f"{s['brevity_penalty']:.3f}",
                f"{s['length_ratio']:.3f}",
                f"{s['chrf']:.2f}",
                str(s["n_sentences"]),
            ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


class ScoreTable(Callback):
    """A Hydra callback (``hydra.callbacks`` in ``conf/evaluate.yaml``): after a multirun, print
    the table of :func:`markdown_table` and write it to ``<sweep dir>/scores.md``.

    The file is also rewritten after every job of a multirun: when a job fails, Hydra ends the
    sweep with its error once the jobs have run, before ``on_multirun_end``, and the table of the
    jobs that did score is still there.
    """

    def on_job_end(self, config: Any, job_return: Any, **kwargs: Any) -> None:
        if config.hydra.mode == RunMode.MULTIRUN:
            self._write(sweep_dir_of(config.hydra))

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        table = self._write(sweep_dir_of(config.hydra))
        sys.stdout.write(f"\n{table}")
        sys.stdout.flush()

    @staticmethod
    def _write(sweep_dir: Path) -> str:
        table = markdown_table(load_scored_jobs(sweep_dir))
        write_text_atomically(sweep_dir / TABLE_FILE, table)
        return table
