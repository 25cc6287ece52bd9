"""Overrides that shrink a ``train.py`` run to seconds on the tiny training corpus, and the
metrics such a run logs."""

import csv
from pathlib import Path

from .tiny_model import tiny_model_fields

# Any model preset (prenorm, postnorm, the experiments' bases) cut to conf/model/tiny.yaml's size,
# and to one layer of two heads: a run takes seconds, and the notebook test reads the attention
# maps of such a checkpoint.
RUN_MODEL = {**tiny_model_fields(), "n_layers": 1, "n_heads": 2}
TINY_MODEL = [f"model.{name}={value}" for name, value in RUN_MODEL.items()]


def tiny_run_overrides(corpus_dir: Path, cache_dir: Path) -> list[str]:
    """A tiny model on the tiny corpus: ~35 batches per epoch, 12 steps, CPU, CSV logs."""
    return [
        "data=multi30k",
        f"data.data_dir={corpus_dir}",
        "data.splits.test=test",
        "data.vocab_size=120",
        "data.max_len=32",
        "data.max_tokens=128",
        "data.num_workers=0",
        f"data.cache_dir={cache_dir}",
        "model=tiny",
        *TINY_MODEL,
        "scheduler.warmup=20",
        "trainer=cpu",
        "trainer.accumulate_grad_batches=1",
        "trainer.max_steps=12",
        "trainer.val_check_interval=6",
        "trainer.log_every_n_steps=1",
        "trainer.num_sanity_val_steps=0",
        "trainer.enable_progress_bar=false",
        "trainer.enable_model_summary=false",
        "logger=csv",
        "callbacks.attention_maps=null",  # its drawing process: seconds; the sweeps keep it
    ]


def without(overrides: list[str], *prefixes: str) -> list[str]:
    """``overrides`` less those that start with one of ``prefixes``."""
    return [o for o in overrides if not o.startswith(prefixes)]


def ablation_overrides(tiny_overrides: list[str]) -> list[str]:
    """The tiny data/trainer overrides for ``experiment=multi30k_base``: without the group
    choices it makes, and with its model and budget cut to 8 steps."""
    dropped = ("data=", "model", "trainer=", "scheduler.", "trainer.max_steps", "trainer.val_")
    dropped += ("callbacks.attention_maps",)
    budget = ["trainer.max_steps=8", "trainer.val_check_interval=4", "scheduler.warmup=20"]
    return without(tiny_overrides, *dropped) + TINY_MODEL + budget


def logged_metrics(path: Path) -> list[dict[str, str]]:
    """The rows of a CSV logger's ``metrics.csv``: one per logged step, "" where a metric was not
    logged at that step."""
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))
