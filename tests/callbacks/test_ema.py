"""'callbacks=[default,ema]': the evaluated and saved weights are the moving average, and a run
resumed from last.ckpt continues both the average and the trained weights exactly."""

import json

import lightning.pytorch as pl
import pytest
import torch
from omegaconf import OmegaConf

from tests.helpers.commands import run_train
from tests.helpers.slow import slow_fixture
from transformer_nmt.checkpoint import load_checkpoint
from transformer_nmt.data import DataConfig, TranslationDataModule
from transformer_nmt.training.module import TranslationModule

pytestmark = pytest.mark.slow  # every test reads runs of train.py

EMA = ["callbacks=[default,ema]", "callbacks.ema.decay=0.9", "trainer.val_check_interval=100"]


@slow_fixture(scope="module")
def ema_run(tiny_overrides, tmp_path_factory):
    root = tmp_path_factory.mktemp("ema")
    run_train([*tiny_overrides, *EMA, f"hydra.run.dir={root / 'run'}"], cwd=root)
    return root / "run"


def validation_loss(run_dir, state_dict) -> float:
    """val/loss of the run's model with ``state_dict``, on the run's validation set."""
    config = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    data = DataConfig(**OmegaConf.to_container(config.data, resolve=True))
    module = TranslationModule.load_from_checkpoint(run_dir / "checkpoints" / "last.ckpt")
    module.load_state_dict(state_dict)
    trainer = pl.Trainer(
        accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    return trainer.validate(module, datamodule=TranslationDataModule(data), verbose=False)[0][
        "val/loss"
    ]


def test_the_final_evaluation_and_the_checkpoints_use_the_averaged_weights(ema_run):
    checkpoint = torch.load(ema_run / "checkpoints" / "last.ckpt", weights_only=False)
    averaged, trained = checkpoint["state_dict"], checkpoint["current_model_state"]
    assert any(not torch.equal(averaged[key], trained[key]) for key in averaged)
    loaded = load_checkpoint(ema_run / "checkpoints" / "last.ckpt").model.state_dict()
    assert all(torch.equal(loaded[key.removeprefix("model.")], v) for key, v in averaged.items())
    summary = json.loads((ema_run / "summary.json").read_text())
    final = summary["metrics"]["val/loss"]
    assert final == pytest.approx(validation_loss(ema_run, averaged), rel=1e-5)
    assert final != pytest.approx(validation_loss(ema_run, trained), rel=1e-3)
    best = torch.load(ema_run / "checkpoints" / "best.ckpt", weights_only=False)
    assert all(torch.equal(best["state_dict"][key], v) for key, v in averaged.items())


def test_resuming_continues_the_average_and_the_weights(ema_run, tiny_overrides, tmp_path):
    stopped, resumed = tmp_path / "stopped", tmp_path / "resumed"
    run_train([*tiny_overrides, *EMA, "trainer.max_steps=8", f"hydra.run.dir={stopped}"], tmp_path)
    last = stopped / "checkpoints" / "last.ckpt"
    run_train([*tiny_overrides, *EMA, f"hydra.run.dir={resumed}", f"ckpt_path={last}"], tmp_path)
    reference = torch.load(ema_run / "checkpoints" / "last.ckpt", weights_only=False)
    got = torch.load(resumed / "checkpoints" / "last.ckpt", weights_only=False)
    assert got["global_step"] == reference["global_step"] == 12
    for part in ("state_dict", "current_model_state"):
        for key, value in reference[part].items():
            torch.testing.assert_close(got[part][key], value, rtol=1e-5, atol=1e-6)
