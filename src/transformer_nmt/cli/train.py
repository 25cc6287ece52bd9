"""``python train.py``: data, model, loggers and trainer from the composed config, then fit."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, fields
from typing import Any

import lightning.pytorch as pl
from hydra.utils import instantiate
from lightning.pytorch.callbacks import Callback, ModelCheckpoint, ProgressBar
from omegaconf import DictConfig, OmegaConf

from transformer_nmt.checkpoint import AtomicCheckpointIO
from transformer_nmt.data.datamodule import TranslationDataModule
from transformer_nmt.evaluation.final_eval import final_evaluation
from transformer_nmt.launch.ddp import adopt_hydra_launcher, distributed_job, wait_for_children
from transformer_nmt.launch.host_memory import keep_freed_memory
from transformer_nmt.model import TransformerConfig
from transformer_nmt.tracking.loggers import build_loggers, finish_loggers
from transformer_nmt.tracking.overrides import job_overrides, override_values
from transformer_nmt.tracking.summary import finite_metrics, run_summary, write_summary
from transformer_nmt.training.module import TranslationModule

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> float | None:
    """Fit the model ``cfg`` describes; returns the best ``val/loss`` (for Hydra sweepers)."""
    with distributed_job():
        return _fit(cfg)


def _fit(cfg: DictConfig) -> float | None:
    started = time.perf_counter()
    if cfg.get("keep_freed_host_memory", False) and keep_freed_memory():
        log.info("glibc keeps freed memory in the heap (keep_freed_host_memory=true)")
    pl.seed_everything(cfg.seed, workers=True)
    datamodule = TranslationDataModule(OmegaConf.to_object(cfg.data))
    model_config = resolve_model_config(
        cfg.model, datamodule.vocab_size, datamodule.pad_id, datamodule.max_len
    )
    run_config = OmegaConf.to_container(cfg, resolve=True)
    module = TranslationModule(
        model_config=model_config,
        tokenizer_dir=datamodule.tokenizer_dir,
        src_lang=datamodule.src_lang,
        tgt_lang=datamodule.tgt_lang,
        bos_id=datamodule.bos_id,
        eos_id=datamodule.eos_id,
        pad_id=datamodule.pad_id,
        label_smoothing=cfg.label_smoothing,
        fused_loss=bool(cfg.fused_loss),
        optimizer=OmegaConf.to_container(cfg.optimizer, resolve=True),
        scheduler=OmegaConf.to_container(cfg.scheduler, resolve=True),
        compile=bool(cfg.compile),
        run_config=run_config,
    )
    options = trainer_options(cfg.trainer)
    loggers = build_loggers(cfg.get("logger"))
    trainer = pl.Trainer(
        **options,
        logger=loggers,
        callbacks=build_callbacks(cfg.get("callbacks"), options.get("enable_progress_bar", True)),
        plugins=[AtomicCheckpointIO()],
        use_distributed_sampler=False,  # the data module shards its own token-bucketed batches
        default_root_dir=cfg.output_dir,
    )
    adopt_hydra_launcher(trainer)
    if trainer.is_global_zero:
        log.info(describe_batch(trainer, datamodule.max_tokens))
    overrides = job_overrides()
    status, error, metrics, fit_time_s = "failed", None, None, None
    try:
        for logger in loggers:
            logger.log_hyperparams(run_config)
            if overrides:  # the job's axes as config keys, for W&B's grouping views
                logger.log_hyperparams({"overrides": override_values(overrides)})
        fit_started = time.perf_counter()
        trainer.fit(module, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))
        fit_time_s = time.perf_counter() - fit_started
        metrics = finite_metrics(trainer.callback_metrics)
        if not trainer.interrupted:
            final_eval, search = (
                OmegaConf.to_object(cfg.final_eval),
                OmegaConf.to_object(cfg.search),
            )
            metrics.update(final_evaluation(trainer, module, datamodule, final_eval, search))
        wait_for_children(trainer)
        status = "interrupted" if trainer.interrupted else "finished"
    except BaseException as exception:
        error = f"{type(exception).__name__}: {exception}"
        raise
    finally:
        finish_loggers(loggers, status == "finished")
        if trainer.is_global_zero:
            summary = run_summary(
                trainer,
                module,
                status,
                error,
                metrics=metrics,
                overrides=overrides,
                wall_time_s=time.perf_counter() - started,
                fit_time_s=fit_time_s,
            )
            write_summary(cfg.output_dir, summary)
    log.info(
        "rank %d of %d finished at step %d; checkpoints in %s/checkpoints",
        trainer.global_rank,
        trainer.world_size,
        trainer.global_step,
        cfg.output_dir,
    )
    best = [c.best_model_score for c in trainer.callbacks if isinstance(c, ModelCheckpoint)]
    return float(best[0]) if best and best[0] is not None else None


def resolve_model_config(model_cfg: Any, vocab_size: int, pad_id: int, data_max_len: int) -> dict:
    """All ``TransformerConfig`` fields as a plain dict, vocabulary sizes and pad id from the data.

    The ``model`` config leaves ``src_vocab_size``, ``tgt_vocab_size`` and ``pad_id`` unset
    (``???``): they are the tokenizer's. A value set there must agree with it.
    """
    options = (
        OmegaConf.to_container(model_cfg, resolve=True, throw_on_missing=False)
        if OmegaConf.is_config(model_cfg)
        else dict(model_cfg)
    )
    for key, value in (
        ("src_vocab_size", vocab_size),
        ("tgt_vocab_size", vocab_size),
        ("pad_id", pad_id),
    ):
        if options.get(key) in (None, "???"):
            options[key] = value
        elif options[key] != value:
            raise ValueError(
                f"model.{key}={options[key]} but the data's tokenizer has {value}; leave "
                f"model.{key} unset to take it from the data"
            )
    known = {f.name for f in fields(TransformerConfig)}
    unknown = sorted(set(options) - known)
    if unknown:  # a key added with +model.<key>=... that the schema does not have
        raise ValueError(f"unknown model option(s) {unknown}; valid keys are {sorted(known)}")
    config = TransformerConfig(**options)
    if config.max_len < data_max_len:
        raise ValueError(
            f"model.max_len={config.max_len} is shorter than data.max_len={data_max_len}: the "
            f"decoder needs a position for every target token; raise model.max_len or lower "
            f"data.max_len"
        )
    return asdict(config)


def trainer_options(trainer_cfg: Any) -> dict:
    """``Trainer`` keyword arguments from the ``trainer`` group, whose intervals all count
    optimizer steps.

    ``max_steps`` and ``log_every_n_steps`` are optimizer steps to Lightning too (so is
    ``callbacks.last_checkpoint.every_n_train_steps``); an integer ``val_check_interval`` is
    training batches to Lightning, so it is multiplied here by ``accumulate_grad_batches``, the
    batches of one optimizer step. (A float stays a fraction of an epoch.)
    """
    options = OmegaConf.to_container(trainer_cfg, resolve=True)
    if "use_distributed_sampler" in options:
        raise ValueError(
            "remove trainer.use_distributed_sampler: it is always False, because the data "
            "module shards its token-bucketed batches across ranks itself"
        )
    accumulate = options.get("accumulate_grad_batches", 1)
    interval = options.get("val_check_interval")
    if isinstance(interval, int) and not isinstance(interval, bool):
        options["val_check_interval"] = interval * accumulate
    return options


def describe_batch(trainer: pl.Trainer, max_tokens: int | None) -> str:
    """What one optimizer step trains on, for the log: micro-batches × devices × tokens."""
    accumulate, devices = trainer.accumulate_grad_batches, trainer.world_size
    if max_tokens is None:
        return f"an optimizer step takes {accumulate} batch(es) on each of {devices} device(s)"
    return (
        f"an optimizer step takes {accumulate} batch(es) x {devices} device(s) x <= {max_tokens} "
        f"padded tokens per side: <= {accumulate * devices * max_tokens:,} target tokens with "
        f"padding (the paper: ~25,000; trainer.accumulate_grad_batches sets the first factor)"
    )


def build_callbacks(callbacks_cfg: Any, enable_progress_bar: bool = True) -> list[Callback]:
    """Instantiate every non-null entry of ``callbacks`` (progress bars only if enabled)."""
    specs = (callbacks_cfg or {}).values()
    # _convert_="object": the ``search`` node they take becomes a SearchOptions
    callbacks = [instantiate(spec, _convert_="object") for spec in specs if spec is not None]
    if not enable_progress_bar:
        callbacks = [c for c in callbacks if not isinstance(c, ProgressBar)]
    return callbacks
