"""Config composition: every option of every group, every experiment, and `--cfg job`."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from transformer_nmt.cli.train import build_callbacks, resolve_model_config, trainer_options
from transformer_nmt.data import TranslationDataModule
from transformer_nmt.model import TransformerConfig
from transformer_nmt.tracking.loggers import ResilientWandbLogger, build_loggers
from transformer_nmt.training.schedules import StepSchedule

from .conftest import REPO_ROOT

CONF = REPO_ROOT / "conf"


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def compose_train(*overrides: str, output_dir: str = "/tmp/out"):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=[f"output_dir={output_dir}", *overrides])


def test_every_group_the_issue_names_has_its_options():
    assert set(options("model")) >= {"postnorm", "prenorm", "base", "big", "tiny"}
    assert set(options("scheduler")) >= {"noam", "inverse_sqrt"}
    assert set(options("trainer")) >= {"default", "cpu", "gpu", "ddp"}
    assert set(options("logger")) >= {"wandb", "csv", "tensorboard", "many", "none"}
    assert set(options("experiment")) >= {"seed_notebook", "paper_base", "multi30k"}
    assert set(options("data")) >= {"wmt16", "multi30k", "wmt16_local"}


@pytest.mark.parametrize("name", options("model"))
def test_model_options_build_a_valid_transformer_config(name):
    cfg = compose_train(f"model={name}")
    config = resolve_model_config(cfg.model, vocab_size=1000, pad_id=0, data_max_len=256)
    assert set(config) == set(TransformerConfig.__dataclass_fields__)
    assert TransformerConfig(**config).share_all_embeddings is True
    assert config["src_vocab_size"] == config["tgt_vocab_size"] == 1000


def test_paper_models_have_the_paper_shapes():
    base = compose_train("model=postnorm").model
    assert (base.d_model, base.n_heads, base.n_encoder_layers, base.d_ff, base.norm) == (
        512, 8, 6, 2048, "post",
    )  # fmt: skip
    assert compose_train("model=prenorm").model.norm == "pre"
    big = compose_train("model=big").model
    assert (big.d_model, big.n_heads, big.d_ff, big.dropout) == (1024, 16, 4096, 0.3)


def test_n_layers_sets_both_stacks_and_either_can_be_set_alone():
    model = compose_train("model=prenorm", "model.n_layers=3").model
    assert (model.n_encoder_layers, model.n_decoder_layers) == (3, 3)
    model = compose_train("model.n_layers=4", "model.n_decoder_layers=2").model
    assert (model.n_encoder_layers, model.n_decoder_layers) == (4, 2)


def test_model_config_errors_name_the_key_and_the_fix():
    cfg = compose_train()
    with pytest.raises(ValueError, match="model.max_len=1024 is shorter than data.max_len=2000"):
        resolve_model_config(cfg.model, vocab_size=100, pad_id=0, data_max_len=2000)
    bad = compose_train("model.src_vocab_size=99").model
    with pytest.raises(ValueError, match="leave model.src_vocab_size null"):
        resolve_model_config(bad, vocab_size=100, pad_id=0, data_max_len=256)
    typo = compose_train("+model.n_head=4").model
    with pytest.raises(ValueError, match=r"unknown model option\(s\) \['n_head'\]"):
        resolve_model_config(typo, vocab_size=100, pad_id=0, data_max_len=256)


@pytest.mark.parametrize("name", options("scheduler"))
def test_scheduler_options_peak_at_warmup(name):
    cfg = compose_train(f"scheduler={name}", "scheduler.warmup=50")
    schedule = StepSchedule(d_model=512, **cfg.scheduler)
    assert schedule.lr(50) == max(schedule.lr(s) for s in range(1, 200))


@pytest.mark.parametrize("name", options("trainer"))
def test_trainer_options_are_trainer_arguments(name):
    options_ = trainer_options(compose_train(f"trainer={name}").trainer)
    assert options_["gradient_clip_val"] == 1.0
    if name in ("default", "cpu"):
        import lightning.pytorch as pl

        trainer = pl.Trainer(**options_, logger=False, enable_checkpointing=False)
        assert trainer.max_steps == 100000


def test_use_distributed_sampler_cannot_be_turned_on():
    cfg = compose_train("+trainer.use_distributed_sampler=true")
    with pytest.raises(ValueError, match="remove trainer.use_distributed_sampler"):
        trainer_options(cfg.trainer)


@pytest.mark.parametrize("name", options("logger"))
def test_logger_options_build_their_loggers(name, tmp_path):
    loggers = build_loggers(compose_train(f"logger={name}", output_dir=str(tmp_path)).logger)
    expected = {"wandb": 1, "csv": 1, "tensorboard": 1, "many": 3, "none": 0}[name]
    assert len(loggers) == expected
    if name in ("wandb", "many"):
        assert any(isinstance(logger, ResilientWandbLogger) for logger in loggers)


@pytest.mark.parametrize("name", options("data"))
def test_data_options_construct_the_data_module(name):
    cfg = compose_train(f"data={name}")
    datamodule = instantiate(cfg.data)  # construction only: no download, no tokenizer
    assert isinstance(datamodule, TranslationDataModule)
    assert datamodule.seed == cfg.seed


def test_callbacks_build_and_progress_bar_follows_the_trainer_flag(tmp_path):
    cfg = compose_train(output_dir=str(tmp_path))
    names = {type(c).__name__ for c in build_callbacks(cfg.callbacks)}
    assert {"ModelCheckpoint", "LastCheckpoint", "RichProgressBar", "SampleTranslations"} <= names
    assert "RichProgressBar" not in {
        type(c).__name__ for c in build_callbacks(cfg.callbacks, enable_progress_bar=False)
    }


def test_experiments_apply_their_recipes():
    seed = compose_train("experiment=seed_notebook")
    assert (seed.model.norm, seed.model.n_encoder_layers, seed.model.n_decoder_layers) == (
        "pre", 3, 3,
    )  # fmt: skip
    assert seed.data.train_split == "train[:10%]" and seed.data.tokenizer == "pretrained"
    assert "opus-mt" in seed.data.tokenizer_name and seed.scheduler.warmup == 4000
    paper = compose_train("experiment=paper_base")
    assert (paper.model.norm, paper.model.d_model, paper.data.vocab_size) == ("post", 512, 37000)
    assert paper.label_smoothing == 0.1 and paper.trainer.max_steps == 100000
    small = compose_train("experiment=multi30k")
    assert small.data.source == "local" and small.model.d_model == 256
    assert small.data.splits.test == "test_2016_flickr"
    # README: the five newest epochs are kept apart from best/last, for average_checkpoints.py
    epochs = small.callbacks.epoch_checkpoints
    assert (epochs.monitor, epochs.mode, epochs.save_top_k) == ("step", "max", 5)
    assert Path(epochs.dirpath).parent == Path(small.callbacks.last_checkpoint.dirpath)
    assert small.final_eval.bleu and small.final_eval.beam_size == 4


@pytest.mark.parametrize("experiment", [None, *options("experiment")])
def test_cfg_job_prints_the_composed_config(experiment, tmp_path):
    args = ["--cfg", "job"] + ([f"experiment={experiment}"] if experiment else [])
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "train.py"), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    cfg = yaml.safe_load(result.stdout)
    assert {"model", "data", "scheduler", "trainer", "logger", "callbacks"} <= set(cfg)
    assert cfg["data"]["_target_"] == "transformer_nmt.data.TranslationDataModule"
    assert not list(Path(tmp_path).iterdir())  # --cfg job writes no output dir
