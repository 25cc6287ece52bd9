"""The LightningModule: checkpoint contract, training that learns, and the non-finite stop."""

import json
import math

import pytest
import torch

from tests.helpers.hydra_config import compose_config
from tests.helpers.tiny_checkpoint import CONTRACT_KEYS
from tests.helpers.tiny_model import PAD, tiny_config
from tests.helpers.tiny_runs import logged_metrics
from transformer_nmt.cli.train import train
from transformer_nmt.model import Transformer, TransformerConfig
from transformer_nmt.training import TranslationModule
from transformer_nmt.training.loss import NonFiniteLossError


def tiny_module(**overrides) -> TranslationModule:
    options = dict(
        model_config=tiny_config().to_dict(), tokenizer_dir="tok", src_lang="en", tgt_lang="de",
        bos_id=1, eos_id=2, pad_id=PAD, scheduler={"name": "noam", "warmup": 10},
    )  # fmt: skip
    return TranslationModule(**{**options, **overrides})


@pytest.mark.parametrize("compile", [False, True])
def test_weights_live_under_model_prefix_even_when_compiled(compile):
    module = tiny_module(compile=compile)
    keys = list(module.state_dict())
    assert keys and all(key.startswith("model.") for key in keys)
    assert not any("_orig_mod" in key for key in keys)
    plain = Transformer(TransformerConfig(**module.hparams.model_config))
    plain.load_state_dict({key.removeprefix("model."): v for key, v in module.state_dict().items()})


def test_hyperparameters_hold_what_a_checkpoint_reader_needs():
    hparams = tiny_module().hparams
    assert set(hparams) >= CONTRACT_KEYS
    assert set(hparams.model_config) == set(TransformerConfig.__dataclass_fields__)


def test_mismatched_pad_ids_are_rejected():
    with pytest.raises(ValueError, match="pad_id"):
        tiny_module(pad_id=3)


def compose_tiny(overrides: list[str], output_dir) -> object:
    return compose_config(*overrides, f"output_dir={output_dir}")


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_a_few_steps_on_the_tiny_corpus_lower_the_loss(norm, tiny_overrides, tmp_path):
    overrides = [
        *tiny_overrides, f"model.norm={norm}", "trainer.max_steps=40",
        "trainer.val_check_interval=20", "callbacks.sample_translations=null",
    ]  # fmt: skip
    objective = train(compose_tiny(overrides, tmp_path))  # optimized_metric: the final val/ppl
    rows = logged_metrics(tmp_path / "csv" / "metrics.csv")
    losses = [float(r["train/loss"]) for r in rows if r["train/loss"]]
    val = [float(r["val/loss"]) for r in rows if r["val/loss"]]
    assert len(losses) == 40 and len(val) == 2
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.5
    assert val[1] < val[0]
    ppl = [(float(r["val/ppl"]), float(r["val/nll"])) for r in rows if r["val/ppl"]]
    assert all(p == pytest.approx(math.exp(n), rel=1e-4) for p, n in ppl)
    assert objective == pytest.approx(ppl[-1][0])
    checkpoint = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)
    assert checkpoint["global_step"] == 40
    assert checkpoint["hyper_parameters"]["model_config"]["norm"] == norm


def test_a_diverging_run_stops_with_a_clear_error(tiny_overrides, tmp_path):
    overrides = [*tiny_overrides, "scheduler.factor=1e30", "callbacks.sample_translations=null"]
    with pytest.raises(NonFiniteLossError, match="not finite at step"):
        train(compose_tiny(overrides, tmp_path))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "failed" and "NonFiniteLossError" in summary["error"]
