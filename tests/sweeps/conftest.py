"""One real tiny 2-job sweep (ablation=norm_warmup on the tiny corpus), shared by the
sweep, W&B, report and notebook tests."""

from pathlib import Path

from tests.helpers.commands import run_train
from tests.helpers.slow import slow_fixture
from tests.helpers.tiny_runs import ablation_overrides, without


@slow_fixture(scope="session")
def tiny_sweep(tiny_overrides, tmp_path_factory) -> Path:
    """``python train.py -m ablation=norm_warmup experiment=multi30k_base`` cut to post/pre x one
    warmup, 8 steps, logged to W&B offline; returns the sweep directory (jobs 0 = post-norm,
    1 = pre-norm).
    """
    root = tmp_path_factory.mktemp("sweep")
    args = without(ablation_overrides(tiny_overrides), "logger=") + ["logger=wandb"]
    sweep_dir = root / "multirun" / "norm_warmup"
    run_train(
        ["-m", "ablation=norm_warmup", "experiment=multi30k_base", *args]
        + [f"hydra.sweep.dir={sweep_dir}"],
        cwd=root,
        env={"WANDB_MODE": "offline"},
    )
    return sweep_dir
