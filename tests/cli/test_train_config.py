"""Config composition: every option of every group, every experiment, and `--cfg job`."""

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from omegaconf import OmegaConf

from tests.helpers.commands import run_script
from tests.helpers.hydra_config import compose_config, conf_options
from transformer_nmt.checkpoint import CheckpointError, average_checkpoints
from transformer_nmt.cli.errors import UsageError
from transformer_nmt.cli.train import describe_batch
from transformer_nmt.cli.train_config import (
    build_callbacks,
    build_model_config,
    check_config,
    check_known_keys,
    data_config,
    model_options,
    plan_resume,
    pretrained_model_config,
    trainer_options,
)
from transformer_nmt.data import TranslationDataModule
from transformer_nmt.decoding import SearchOptions
from transformer_nmt.model import TransformerConfig
from transformer_nmt.tracking.loggers import ResilientWandbLogger, build_loggers
from transformer_nmt.training.schedules import StepSchedule


def compose_train(*overrides: str, output_dir: str = "/tmp/out"):
    return compose_config(f"output_dir={output_dir}", *overrides)


def resolve_model_config(model_cfg, vocab_size: int, pad_id: int, data_max_len: int) -> dict:
    """The model config train.py builds: checked before the data, then given the vocabulary."""
    return build_model_config(model_options(model_cfg, data_max_len), vocab_size, pad_id).to_dict()


def test_every_group_has_its_options():
    assert set(conf_options("model")) == {"postnorm", "prenorm", "big", "tiny"}
    assert set(conf_options("scheduler")) >= {"noam", "inverse_sqrt"}
    assert set(conf_options("trainer")) >= {"default", "cpu", "gpu", "ddp"}
    assert set(conf_options("logger")) >= {"wandb", "csv", "tensorboard", "many", "none"}
    assert set(conf_options("experiment")) == {"multi30k", "multi30k_base", "wmt16_10pct"}
    assert set(conf_options("data")) == {"wmt16", "multi30k", "text_files", "wmt16_files"}
    assert set(conf_options("debug")) == {"smoke", "fast_dev_run"}
    assert set(conf_options("hparams_search")) == {"optuna"}


def test_no_two_model_options_build_the_same_model():
    built = [
        tuple(
            sorted(resolve_model_config(compose_train(f"model={name}").model, 100, 0, 256).items())
        )
        for name in conf_options("model")
    ]
    assert len(set(built)) == len(built)


def test_the_default_run_is_the_papers_base_model_and_search():
    cfg = compose_train()
    model = TransformerConfig(**resolve_model_config(cfg.model, 37000, 0, 256))
    assert model == TransformerConfig(37000, 37000, pad_id=0)  # the schema's defaults
    assert OmegaConf.to_object(cfg.search) == SearchOptions()
    assert (cfg.scheduler.name, cfg.scheduler.warmup, cfg.scheduler.d_model) == ("noam", 4000, 512)
    assert cfg.label_smoothing == 0.1 and cfg.data.vocab_size == 37000


@pytest.mark.parametrize("name", conf_options("model"))
def test_model_options_build_a_valid_transformer_config(name):
    cfg = compose_train(f"model={name}")
    config = resolve_model_config(cfg.model, vocab_size=1000, pad_id=0, data_max_len=256)
    assert set(config) == set(TransformerConfig.__dataclass_fields__)
    assert TransformerConfig(**config).share_all_embeddings is True
    assert config["src_vocab_size"] == config["tgt_vocab_size"] == 1000


def test_paper_models_have_the_paper_shapes():
    base = compose_train("model=postnorm").model
    assert (base.d_model, base.n_heads, base.n_layers, base.d_ff, base.norm) == (
        512, 8, 6, 2048, "post",
    )  # fmt: skip
    assert compose_train("model=prenorm").model.norm == "pre"
    big = compose_train("model=big").model
    assert (big.d_model, big.n_heads, big.d_ff, big.dropout) == (1024, 16, 4096, 0.3)


def test_n_layers_sets_both_stacks_and_either_can_be_set_alone():
    def stacks(*overrides):
        config = resolve_model_config(compose_train(*overrides).model, 100, 0, 256)
        return config["n_encoder_layers"], config["n_decoder_layers"]

    assert stacks("model=prenorm", "model.n_layers=3") == (3, 3)
    assert stacks("model.n_layers=4", "model.n_decoder_layers=2") == (4, 2)


def test_model_config_errors_name_the_key_and_the_fix():
    cfg = compose_train()
    with pytest.raises(ValueError, match="model.max_len=1024 is shorter than data.max_len=2000"):
        resolve_model_config(cfg.model, vocab_size=100, pad_id=0, data_max_len=2000)
    bad = compose_train("model.src_vocab_size=99").model
    with pytest.raises(ValueError, match="leave model.src_vocab_size unset"):
        resolve_model_config(bad, vocab_size=100, pad_id=0, data_max_len=256)
    with pytest.raises(Exception, match="Could not override 'model.n_head'"):
        compose_train("model.n_head=4")
    typo = compose_train("+model.n_head=4")
    with pytest.raises(ValueError, match=r"unknown model option\(s\) \['n_head'\]"):
        check_known_keys(typo)
    with pytest.raises(Exception, match="n_heads"):
        compose_train("model.n_heads=four")


@pytest.mark.parametrize(
    ("override", "error"),
    [
        ("+data.max_token=1000", "unknown data option(s) ['max_token']; valid keys are"),
        ("+trainer.precison=16", "unknown trainer option(s) ['precison']; valid keys are"),
        ("+module.label_smothing=0", "unknown module option(s) ['label_smothing']; valid keys"),
        ("final_eval.splits=[dev]", "final_eval: final_eval.splits has unknown split(s) ['dev']"),
        ("scheduler.warmup=0", "scheduler: scheduler.warmup must be a positive integer, got 0"),
        ("trainer.max_steps=-1 scheduler.cooldown=500", "scheduler: scheduler.cooldown=500 needs"),
        ("label_smoothing=1.5", "label_smoothing must be in [0, 1), got 1.5"),
        ("callbacks.last_checkpoint.every_n_train_steps=0", "callbacks.last_checkpoint: every_n"),
        ("optimized_metric=val/acc", "optimized_metric: optimized_metric=val/acc is not a metric"),
        ("resume=sometimes", "resume=sometimes is not an option; use resume=auto or resume=never"),
    ],
)
def test_every_config_object_is_checked_before_the_data(override, error, tmp_path):
    with pytest.raises(UsageError) as raised:
        check_config(compose_train(*override.split(), output_dir=str(tmp_path)))
    assert str(raised.value).startswith(error)


@pytest.mark.parametrize("debug", conf_options("debug"))
@pytest.mark.parametrize("experiment", conf_options("experiment"))
def test_every_recipe_can_be_checked_in_seconds(experiment, debug, tmp_path):
    # e.g. debug=smoke's 250 steps are shorter than a recipe's cooldown: the debug option wins
    cfg = compose_train(f"experiment={experiment}", f"debug={debug}", output_dir=str(tmp_path))
    check_config(cfg)
    schedule = OmegaConf.to_object(cfg.scheduler)
    assert schedule.cooldown <= max(schedule.total_steps, 0)


def test_resuming_checks_the_checkpoint_before_the_data(tmp_path, workspace):
    model = workspace.model.config.to_dict()
    copy = shutil.copy(workspace.ckpt_path, tmp_path / "copy.ckpt")
    averaged = average_checkpoints([workspace.ckpt_path, copy], tmp_path / "averaged.ckpt")
    cfg = compose_train(f"ckpt_path={averaged}", output_dir=str(tmp_path))
    with pytest.raises(CheckpointError, match="no optimizer or loop state"):
        plan_resume(cfg, model, callbacks=[])
    cfg = compose_train(f"ckpt_path={workspace.ckpt_path}", output_dir=str(tmp_path))
    with pytest.raises(CheckpointError, match=r"with model.n_heads=4 but this run's config has"):
        plan_resume(cfg, {**model, "n_heads": 2, "d_k": 16, "d_v": 16}, callbacks=[])
    resumed = plan_resume(cfg, {**model, "dropout": 0.3}, callbacks=[])  # changes no weight
    assert resumed.ckpt_path == str(workspace.ckpt_path)
    assert resumed.hyper_parameters["model_config"] == model


def test_init_from_brings_the_pretrained_tokenizer_and_shape():
    model = TransformerConfig(50, 50, pad_id=0, d_model=32, d_ff=64, n_heads=4)
    pretrained = SimpleNamespace(tokenizer_dir="/models/opus", model=SimpleNamespace(config=model))
    data = OmegaConf.to_object(compose_train("data=multi30k").data)
    assert data_config(data, None) is data
    taken = data_config(data, pretrained)
    assert (taken.tokenizer, taken.tokenizer_name) == ("pretrained", "/models/opus")
    with pytest.raises(UsageError, match="data.tokenizer_name=/models/opus; leave data.tokenizer"):
        data_config(taken, SimpleNamespace(tokenizer_dir="/models/other"))
    options = pretrained_model_config(pretrained, compose_train("model.dropout=0.3").model)
    assert (options["d_model"], options["n_heads"], options["dropout"]) == (32, 4, 0.3)


@pytest.mark.parametrize("name", conf_options("scheduler"))
def test_scheduler_options_peak_at_warmup(name):
    cfg = compose_train(f"scheduler={name}", "scheduler.warmup=50")
    schedule = OmegaConf.to_object(cfg.scheduler)
    assert isinstance(schedule, StepSchedule) and schedule.d_model == cfg.model.d_model
    assert schedule.lr(50) == max(schedule.lr(s) for s in range(1, 200))


def test_a_cooldown_ends_where_trainer_max_steps_does():
    cfg = compose_train("scheduler=inverse_sqrt", "scheduler.cooldown=100", "trainer.max_steps=400")
    schedule = OmegaConf.to_object(cfg.scheduler)
    assert schedule.total_steps == 400
    assert schedule.lr(300) > schedule.lr(350) > schedule.lr(399) > schedule.lr(400) == 0.0


@pytest.mark.parametrize("name", conf_options("trainer"))
def test_trainer_options_are_trainer_arguments(name):
    options = trainer_options(compose_train(f"trainer={name}").trainer)
    assert options["gradient_clip_val"] == 1.0
    if name in ("default", "cpu"):
        import lightning.pytorch as pl

        trainer = pl.Trainer(**options, logger=False, enable_checkpointing=False)
        assert trainer.max_steps == 100000


def test_intervals_count_optimizer_steps_and_the_main_job_steps_on_the_papers_batch():
    cfg = compose_train()
    options = trainer_options(cfg.trainer)
    # 6 batches of <= 4096 padded tokens per side: ~24k target tokens per step (paper: ~25k)
    assert options["accumulate_grad_batches"] * cfg.data.max_tokens == 6 * 4096
    assert options["val_check_interval"] == 5000 * 6  # Lightning counts batches
    cfg.trainer.accumulate_grad_batches = 3
    assert trainer_options(cfg.trainer)["val_check_interval"] == 15000
    cfg.trainer.val_check_interval = 0.5
    assert trainer_options(cfg.trainer)["val_check_interval"] == 0.5  # a share of an epoch
    # train.py's log says what one step trains on
    line = describe_batch(SimpleNamespace(accumulate_grad_batches=6, world_size=2), 4096)
    assert "6 batch(es) x 2 device(s) x <= 4096 padded tokens" in line and "49,152" in line


def test_use_distributed_sampler_cannot_be_turned_on():
    cfg = compose_train("+trainer.use_distributed_sampler=true")
    with pytest.raises(ValueError, match="remove trainer.use_distributed_sampler"):
        trainer_options(cfg.trainer)


@pytest.mark.parametrize("name", conf_options("logger"))
def test_logger_options_build_their_loggers(name, tmp_path):
    loggers = build_loggers(compose_train(f"logger={name}", output_dir=str(tmp_path)).logger)
    expected = {"wandb": 1, "csv": 1, "tensorboard": 1, "many": 3, "none": 0}[name]
    assert len(loggers) == expected
    if name in ("wandb", "many"):
        assert any(isinstance(logger, ResilientWandbLogger) for logger in loggers)


@pytest.mark.parametrize("name", conf_options("data"))
def test_data_options_construct_the_data_module(name):
    needs_dir = name in ("text_files", "multi30k")
    cfg = compose_train(f"data={name}", "data.data_dir=/corpus" if needs_dir else "seed=0")
    datamodule = TranslationDataModule(OmegaConf.to_object(cfg.data))  # no download, no tokenizer
    assert isinstance(datamodule, TranslationDataModule)
    assert datamodule.seed == cfg.seed


def test_callbacks_build_and_progress_bar_follows_the_trainer_flag(tmp_path):
    cfg = compose_train(output_dir=str(tmp_path))
    names = {type(c).__name__ for c in build_callbacks(cfg.callbacks)}
    assert {"ModelCheckpoint", "LastCheckpoint", "ProgressBar", "TrainingLog"} <= names
    samples = next(
        c for c in build_callbacks(cfg.callbacks) if type(c).__name__ == "SampleTranslations"
    )
    assert samples.search == SearchOptions()  # the run's ``search`` node, as the dataclass
    assert "ProgressBar" not in {
        type(c).__name__ for c in build_callbacks(cfg.callbacks, enable_progress_bar=False)
    }


def test_experiments_apply_their_recipes():
    notebook = compose_train("experiment=wmt16_10pct")
    assert (notebook.model.norm, notebook.model.n_layers) == ("pre", 3)
    assert notebook.data.train_split == "train[:10%]" and notebook.data.tokenizer == "pretrained"
    assert "opus-mt" in notebook.data.tokenizer_name and notebook.scheduler.warmup == 4000
    small = compose_train("experiment=multi30k")
    assert small.data.source == "multi30k" and small.model.d_model == 128
    assert small.scheduler.name == "inverse_sqrt" and small.scheduler.peak_lr > 0
    # README: the five newest epochs are kept apart from best/last, for average_checkpoints.py
    epochs = small.callbacks.epoch_checkpoints
    assert (epochs.monitor, epochs.mode, epochs.save_top_k) == ("step", "max", 5)
    assert Path(epochs.dirpath).parent == Path(small.callbacks.last_checkpoint.dirpath)
    assert small.final_eval.bleu and small.search.beam_size == 4
    # a step budget whose cooldown starts after the warmup ends
    assert small.trainer.max_steps - small.scheduler.cooldown > small.scheduler.warmup > 0
    base = compose_train("experiment=multi30k_base")
    assert (base.model.norm, base.model.n_heads, base.model.d_model) == ("post", 8, 256)
    assert (base.model.n_layers, base.model.d_ff, base.model.dropout) == (3, 1024, 0.1)
    assert base.trainer.max_steps == 3000 and base.final_eval.bleu and base.search.beam_size == 1
    # the CPU recipes step on one batch
    assert small.trainer.accumulate_grad_batches == base.trainer.accumulate_grad_batches == 1


@pytest.mark.slow  # starts train.py
@pytest.mark.parametrize("experiment", [None, *conf_options("experiment")])
def test_cfg_job_prints_the_composed_config(experiment, tmp_path):
    args = ["--cfg", "job"] + ([f"experiment={experiment}"] if experiment else [])
    result = run_script("train.py", *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    cfg = yaml.safe_load(result.stdout)
    assert {"model", "data", "scheduler", "trainer", "logger", "callbacks", "search"} <= set(cfg)
    assert cfg["model"]["src_vocab_size"] == "???"  # from the tokenizer
    assert not list(Path(tmp_path).iterdir())  # --cfg job writes no output dir


@pytest.mark.slow  # starts train.py
def test_cfg_job_does_not_import_lightning(tmp_path):
    """Reading the config stays fast: the schemas import torch at most, never Lightning."""
    result = run_script(
        "train.py", "--cfg", "job", cwd=tmp_path, python_options=("-X", "importtime")
    )
    assert result.returncode == 0, result.stderr
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    assert "torch" in imported and "lightning" not in imported


def test_the_module_node_builds_the_lightning_module_with_the_training_keys():
    from hydra.utils import instantiate

    cfg = compose_train(
        "model=tiny", "label_smoothing=0.2", "fused_loss=false", "optimizer.weight_decay=0.01",
        "scheduler=inverse_sqrt", "scheduler.peak_lr=1e-3",
    )  # fmt: skip
    model = build_model_config(model_options(cfg.model, cfg.data.max_len), 100, 0)
    module = instantiate(cfg.module, _convert_="all")(
        model_config=model.to_dict(), tokenizer_dir="tok", src_lang="en", tgt_lang="de",
        bos_id=1, eos_id=2, pad_id=0,
    )  # fmt: skip
    hparams = module.hparams
    assert (hparams.label_smoothing, hparams.fused_loss) == (0.2, False)
    assert hparams.optimizer == {
        "betas": [0.9, 0.98], "eps": 1e-9, "weight_decay": 0.01, "fused": None,
    }  # fmt: skip
    assert (module.schedule.name, module.schedule.peak_lr, module.schedule.d_model) == (
        "inverse_sqrt", 1e-3, model.d_model,
    )  # fmt: skip
    optimizer = module.configure_optimizers()["optimizer"]
    assert optimizer.defaults["weight_decay"] == 0.01


def test_an_added_key_at_an_unknown_top_level_place_is_refused_naming_it():
    from transformer_nmt.cli.train_config import check_added_top_level_keys

    known = {"label_smoothing", "logger", "data", "experiment"}
    check_added_top_level_keys(
        ["+logger.wandb.id=abc", "+data.x=1", "+experiment=multi30k", "++foo=1", "+hydra.a=1"],
        known,
    )  # an option of a known node, a group, a forced add (++), Hydra's own: all left alone
    with pytest.raises(UsageError) as error:
        check_added_top_level_keys(["seed=1", "+label_smothing=0.2"], known)
    assert str(error.value) == (
        "+label_smothing: there is no top-level key 'label_smothing', so nothing would read it; "
        "the top-level keys are ['data', 'experiment', 'label_smoothing', 'logger']"
    )
    check_added_top_level_keys(["+foo=1"], None)  # outside a Hydra job: nothing to check


def test_max_steps_0_is_refused_and_a_bpe_above_vocab_size_is_named(caplog):
    from transformer_nmt.cli.train import check_training_budget, warn_about_vocabulary_size
    from transformer_nmt.data import DataConfig

    with pytest.raises(UsageError, match="trainer.max_steps=0 trains nothing"):
        check_training_budget({"max_steps": 0})
    check_training_budget({"max_steps": -1})
    check_training_budget({"max_steps": 0, "fast_dev_run": 1})  # one batch each, no checkpoint
    warn_about_vocabulary_size(DataConfig(vocab_size=5), 105)
    assert "the joint BPE holds 105 types, more than data.vocab_size=5" in caplog.text
    caplog.clear()
    warn_about_vocabulary_size(DataConfig(vocab_size=120), 120)
    warn_about_vocabulary_size(DataConfig(vocab_size=5, tokenizer="pretrained"), 105)
    assert caplog.text == ""
