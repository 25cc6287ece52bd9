"""Every ``experiment=ablate_*`` sweep expands into the jobs it promises, without training."""

import functools
import itertools

import lightning.pytorch as pl
import pytest
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from lightning.fabric.utilities import rank_zero as fabric_rank_zero
from lightning.pytorch.utilities import rank_zero as pytorch_rank_zero
from lightning_utilities.core import rank_zero as utilities_rank_zero

from transformer_nmt.cli.train import resolve_model_config
from transformer_nmt.launch.ddp import adopt_hydra_launcher

from ..training.conftest import REPO_ROOT

CONF = REPO_ROOT / "conf"
RANK_ZERO_ONLY = [
    module.rank_zero_only for module in (fabric_rank_zero, pytorch_rank_zero, utilities_rank_zero)
]

# experiment -> the swept model/config values of its jobs, in job order
EXPECTED = {
    "ablate_heads": {"model.n_heads": [1, 4, 8, 16]},
    "ablate_dk": {"model.d_head": [8, 16, 32]},
    "ablate_size": {
        "model_size": ["base", "N2", "N4", "N8", "d_model128", "d_model512", "d_ff512", "d_ff2048"]
    },
    "ablate_regularization": {
        "model.dropout": [0.0, 0.1, 0.2],
        "label_smoothing": [0.0, 0.1, 0.2],
    },
    "ablate_positional": {"model.positional": ["sinusoidal", "learned"]},
    "ablate_norm_warmup": {"model.norm": ["post", "pre"], "scheduler.warmup": [200, 2000]},
    "ablate_layers": {"model.n_layers": [1, 2, 3, 4, 6]},
}


def compose_hydra(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=overrides, return_hydra_config=True)


def sweep_jobs(*args: str) -> list[list[str]]:
    """The jobs ``python train.py -m *args`` launches: the BasicSweeper's own expansion of
    ``hydra.sweeper.params`` followed by the command line (whose values win).
    """
    fixed = [a for a in args if "," not in a]
    params = compose_hydra(fixed).hydra.sweeper.params or {}
    overrides = [f"{key}={value}" for key, value in params.items()] + list(args)
    parsed = OverridesParser.create().parse_overrides(overrides)
    return BasicSweeper.split_arguments(parsed, max_batch_size=None)[0]


@functools.cache
def job_configs(*args: str) -> list:
    """The composed config (with ``hydra``) of every job of the sweep, composed once."""
    return [compose_hydra(job) for job in sweep_jobs(*args)]


def value(cfg, key: str):
    if key == "model_size":
        return cfg.hydra.runtime.choices["model_size"]
    node = cfg
    for part in key.split("."):
        node = node[part]
    return node


def test_every_ablate_experiment_is_listed_here():
    assert sorted(p.stem for p in (CONF / "experiment").glob("ablate_*.yaml")) == sorted(EXPECTED)


@pytest.mark.parametrize("experiment", sorted(EXPECTED))
def test_sweep_expands_to_the_grid_on_the_small_base_with_equal_budgets(experiment):
    configs = job_configs(f"experiment={experiment}")
    axes = EXPECTED[experiment]
    assert len(configs) == len(list(itertools.product(*axes.values())))
    got = [tuple(value(cfg, key) for key in axes) for cfg in configs]
    assert got == list(itertools.product(*axes.values()))
    for cfg in configs:
        assert cfg.hydra.sweep.dir.startswith(f"multirun/{experiment}/")
        assert cfg.data.source == "local" and cfg.data.vocab_size == 8000  # Multi30k
        assert (cfg.trainer.max_steps, cfg.trainer.max_time) == (3000, None)  # equal budgets
        assert cfg.final_eval.bleu and list(cfg.final_eval.splits) == ["val", "test"]
        model = resolve_model_config(cfg.model, 8000, 0, cfg.data.max_len)  # a valid model
        assert model["d_model"] % model["n_heads"] == 0 or model["d_head"]


def test_heads_keep_compute_fixed_and_size_changes_one_thing_at_a_time():
    heads = job_configs("experiment=ablate_heads")
    shapes = [(c.model.n_heads, c.model.d_model // c.model.n_heads) for c in heads]
    assert shapes == [(1, 256), (4, 64), (8, 32), (16, 16)]  # h * d_k = d_model
    sizes = {
        c.hydra.runtime.choices["model_size"]: (c.model.n_layers, c.model.d_model, c.model.d_ff)
        for c in job_configs("experiment=ablate_size")
    }
    assert sizes["base"] == (3, 256, 1024)
    assert (sizes["N8"], sizes["d_model512"], sizes["d_ff2048"]) == (
        (8, 256, 1024), (3, 512, 1024), (3, 256, 2048),
    )  # fmt: skip


def test_paper_base_and_command_line_values_replace_the_small_ones():
    configs = job_configs(
        "experiment=ablate_heads", "ablation_base=paper", "model.n_heads=1,4,16,32"
    )
    assert [c.model.n_heads for c in configs] == [1, 4, 16, 32]
    for cfg in configs:
        assert (cfg.data.source, cfg.data.vocab_size, cfg.model.d_model) == ("hub", 37000, 512)
        assert (cfg.model.norm, cfg.model.n_layers, cfg.trainer.max_steps) == ("post", 6, 100000)


def test_slurm_launcher_takes_tasks_and_nodes_from_the_trainer():
    cfg = compose_hydra(
        ["hydra/launcher=slurm", "trainer.devices=4", "trainer.num_nodes=2"]
        + ["hydra.launcher.partition=gpu"]
    )
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert (launcher.tasks_per_node, launcher.nodes, launcher.gpus_per_node) == (4, 2, 4)
    assert launcher.partition == "gpu"
    local = compose_hydra(["hydra/launcher=local"]).hydra.launcher
    assert local._target_.endswith("submitit_launcher.LocalLauncher")
    assert local.tasks_per_node == 1


def test_under_slurm_lightning_owns_the_ranks_and_the_hydra_launcher_stays_out(monkeypatch):
    slurm = {
        "SLURM_NTASKS": "4",
        "SLURM_NTASKS_PER_NODE": "2",
        "SLURM_JOB_NAME": "train",
        "SLURM_NODELIST": "node[1-2]",
        "SLURM_JOB_ID": "42",
        "SLURM_PROCID": "3",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "1",
        "SLURM_NNODES": "2",
        "OMP_NUM_THREADS": "1",
    }
    for name, value_ in slurm.items():
        monkeypatch.setenv(name, value_)
    for rank_zero_only in RANK_ZERO_ONLY:  # the DDP strategy sets the process-wide rank (3 here)
        monkeypatch.setattr(rank_zero_only, "rank", rank_zero_only.rank)
    trainer = pl.Trainer(accelerator="cpu", devices=2, num_nodes=2, strategy="ddp", logger=False)
    adopt_hydra_launcher(trainer)
    assert type(trainer.strategy.cluster_environment).__name__ == "SLURMEnvironment"
    assert (trainer.global_rank, trainer.local_rank, trainer.node_rank) == (3, 1, 1)
    launcher = trainer.strategy.launcher
    assert launcher.launch(lambda: "job ran") == "job ran"
    assert launcher.procs == []  # srun started every rank; no child process was started
