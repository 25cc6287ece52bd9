"""One real tiny 2-job sweep (ablation=norm_warmup on the tiny corpus), shared by the
sweep, W&B, report and notebook tests; and the tiny corpus and overrides of tests/training.
"""

from pathlib import Path

import pytest

from tests.training.conftest import cache_dir, corpus_dir, run_train, tiny_overrides  # noqa: F401

# experiment=multi30k_base sets the Multi30k base; these shrink it to seconds on the tiny corpus.
TINY_ABLATION = [
    "model.d_model=32",
    "model.n_heads=2",
    "model.d_ff=64",
    "model.n_layers=1",
    "model.max_len=64",
    "trainer.max_steps=8",
    "trainer.val_check_interval=4",
    "scheduler.warmup=20",
]


def ablation_overrides(tiny_overrides: list[str]) -> list[str]:  # noqa: F811
    """The tiny data/trainer overrides without the group choices experiment=multi30k_base makes."""
    dropped = ("data=", "model", "trainer=", "scheduler.", "trainer.max_steps", "trainer.val_")
    return [o for o in tiny_overrides if not o.startswith(dropped)] + TINY_ABLATION


@pytest.fixture(scope="session")
def tiny_sweep(tiny_overrides, tmp_path_factory) -> Path:  # noqa: F811
    """``python train.py -m ablation=norm_warmup experiment=multi30k_base`` cut to post/pre x one
    warmup, 8 steps,
    logged to W&B offline; returns the sweep directory (jobs 0 = post-norm, 1 = pre-norm).
    """
    root = tmp_path_factory.mktemp("sweep")
    args = [o for o in ablation_overrides(tiny_overrides) if o != "logger=csv"] + ["logger=wandb"]
    sweep_dir = root / "multirun" / "norm_warmup"
    run_train(
        ["-m", "ablation=norm_warmup", "experiment=multi30k_base", *args]
        + [f"hydra.sweep.dir={sweep_dir}"],
        cwd=root,
        env={"WANDB_MODE": "offline"},
    )
    return sweep_dir
