"""Every ``ablation=<axis>`` sweep expands into the jobs it promises, without training: the
paper's Table 3 values on the paper's base, or the same sweep on the Multi30k base."""

import functools
import itertools

import lightning.pytorch as pl
import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from lightning.fabric.utilities import rank_zero as fabric_rank_zero
from lightning.pytorch.utilities import rank_zero as pytorch_rank_zero
from lightning_utilities.core import rank_zero as utilities_rank_zero

from tests.helpers.hydra_config import compose_config, conf_options
from transformer_nmt.cli.train_config import build_model_config, model_options
from transformer_nmt.launch.ddp import adopt_hydra_launcher
from transformer_nmt.private_api import basic_sweeper_jobs

RANK_ZERO_ONLY = [
    module.rank_zero_only for module in (fabric_rank_zero, pytorch_rank_zero, utilities_rank_zero)
]

# ablation -> the swept values of its jobs, in job order: Table 3's rows and the base's value
EXPECTED = {
    "heads": {"model.n_heads": [1, 4, 8, 16, 32]},  # (A)
    "d_k": {"model.d_k": [16, 32, 64]},  # (B)
    "layers": {"model.n_layers": [2, 4, 6, 8]},  # (C)
    "d_model": {"model.d_model": [256, 512, 1024]},  # (C)
    "d_ff": {"model.d_ff": [1024, 2048, 4096]},  # (C)
    "dropout": {"model.dropout": [0.0, 0.1, 0.2]},  # (D)
    "label_smoothing": {"label_smoothing": [0.0, 0.1, 0.2]},  # (D)
    "positional": {"model.positional": ["sinusoidal", "learned"]},  # (E)
    "norm_warmup": {"model.norm": ["post", "pre"], "scheduler.warmup": [1000, 4000, 16000]},
    "norm_layer": {"model.norm_layer": ["layernorm", "rmsnorm"]},
}


def compose_hydra(overrides: list[str]):
    return compose_config(*overrides, return_hydra_config=True)


def sweep_jobs(*args: str) -> list[list[str]]:
    """The jobs ``python train.py -m *args`` launches: the BasicSweeper's own expansion of
    ``hydra.sweeper.params`` followed by the command line (whose values win).
    """
    fixed = [a for a in args if "," not in a]
    params = compose_hydra(fixed).hydra.sweeper.params or {}
    overrides = [f"{key}={value}" for key, value in params.items()] + list(args)
    return basic_sweeper_jobs(OverridesParser.create().parse_overrides(overrides))


@functools.cache
def job_configs(*args: str) -> list:
    """The composed config (with ``hydra``) of every job of the sweep, composed once."""
    return [compose_hydra(job) for job in sweep_jobs(*args)]


def value(cfg, key: str):
    node = cfg
    for part in key.split("."):
        node = node[part]
    return node


def model_of(cfg) -> dict:
    options = model_options(cfg.model, cfg.data.max_len)
    return build_model_config(options, 37000, 0).to_dict()  # a valid model


def test_every_ablation_is_listed_here():
    assert conf_options("ablation") == sorted(EXPECTED)


@pytest.mark.parametrize("ablation", sorted(EXPECTED))
def test_sweep_expands_to_the_papers_rows_on_the_papers_base(ablation):
    configs = job_configs(f"ablation={ablation}")
    axes = EXPECTED[ablation]
    got = [tuple(value(cfg, key) for key in axes) for cfg in configs]
    assert got == list(itertools.product(*axes.values()))
    for cfg in configs:
        assert cfg.hydra.sweep.dir.startswith(f"multirun/{ablation}/")
        assert (cfg.data.source, cfg.data.vocab_size) == ("hub", 37000)  # WMT16, shared 37k BPE
        assert (cfg.trainer.max_steps, cfg.trainer.max_time) == (100000, None)  # equal budgets
        assert cfg.final_eval.bleu and list(cfg.final_eval.splits) == ["val", "test"]
        assert cfg.search.beam_size == 4  # Table 3 used beam search, no averaging
        model_of(cfg)


def test_each_row_changes_only_its_own_quantities():
    base = model_of(compose_hydra([]))
    for ablation, axes in EXPECTED.items():
        for cfg in job_configs(f"ablation={ablation}"):
            changed = {k for k, v in model_of(cfg).items() if v != base[k]}
            allowed = {key.removeprefix("model.") for key in axes}
            if ablation == "heads" or ablation == "d_model":  # d_k = d_v = d_model / h follow
                allowed |= {"d_k", "d_v"}
            if ablation == "layers":
                allowed |= {"n_encoder_layers", "n_decoder_layers"}
            assert changed <= allowed, (ablation, changed)


def test_heads_keep_compute_fixed_and_d_k_leaves_d_v_alone():
    heads = [model_of(c) for c in job_configs("ablation=heads")]
    assert [(m["n_heads"], m["d_k"], m["d_v"]) for m in heads] == [
        (1, 512, 512), (4, 128, 128), (8, 64, 64), (16, 32, 32), (32, 16, 16),
    ]  # fmt: skip
    d_k = [model_of(c) for c in job_configs("ablation=d_k")]
    assert [(m["d_k"], m["d_v"]) for m in d_k] == [(16, 64), (32, 64), (64, 64)]


def test_the_multi30k_base_and_command_line_values_replace_the_papers():
    configs = job_configs("ablation=d_k", "experiment=multi30k_base", "model.d_k=8,16,32")
    assert [c.model.d_k for c in configs] == [8, 16, 32]
    for cfg in configs:
        assert (cfg.data.source, cfg.data.vocab_size, cfg.model.d_model) == (
            "multi30k",
            8000,
            256,
        )
        assert (cfg.model.norm, cfg.model.n_layers, cfg.trainer.max_steps) == ("post", 3, 3000)
        assert cfg.final_eval.bleu and cfg.search.beam_size == 1
        assert cfg.hydra.sweep.dir.startswith("multirun/d_k/")


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
