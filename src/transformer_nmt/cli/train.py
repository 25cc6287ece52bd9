"""``python train.py``: data, model, loggers and trainer from the composed config, then fit."""

from __future__ import annotations

import logging
import time

import lightning.pytorch as pl
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from transformer_nmt.checkpoint import AtomicCheckpointIO
from transformer_nmt.data import tokenizer_identity
from transformer_nmt.data.datamodule import TranslationDataModule
from transformer_nmt.evaluation.final_eval import final_evaluation
from transformer_nmt.launch.ddp import adopt_hydra_launcher, distributed_job, wait_for_children
from transformer_nmt.launch.host_memory import keep_freed_memory
from transformer_nmt.tracking.loggers import finish_loggers
from transformer_nmt.tracking.overrides import job_overrides, override_values
from transformer_nmt.tracking.summary import finite_metrics, run_summary, write_summary
from transformer_nmt.training.module import TranslationModule

from .errors import UsageError
from .train_config import (
    TrainConfig,
    build_run_loggers,
    check_config,
    check_writable_outputs,
    data_config,
    pretrained_model,
    pretrained_model_config,
    read_resume_checkpoint,
    require_checkpoint_tokenizer,
    resolve_model_config,
)

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> float | None:
    """Fit the model ``cfg`` describes; returns the best ``val/loss`` (for Hydra sweepers)."""
    with distributed_job():
        return _fit(cfg)


def _fit(cfg: DictConfig) -> float | None:
    started = time.perf_counter()
    overrides = job_overrides()
    trainer, module, loggers = None, None, []
    status, error, metrics, fit_time_s = "failed", None, None, None
    try:
        if cfg.get("keep_freed_host_memory", False) and keep_freed_memory():
            log.info("glibc keeps freed memory in the heap (keep_freed_host_memory=true)")
        pl.seed_everything(cfg.seed, workers=True)
        # every check that needs no data first: reading the corpus or training a BPE takes long
        checked = check_config(cfg)
        pretrained = pretrained_model(cfg.get("init_from"), checked.data)
        datamodule = TranslationDataModule(data_config(checked.data, pretrained))
        check_writable_outputs(cfg.output_dir, checked.callbacks)
        resume_from = read_resume_checkpoint(cfg, checked.model)
        run_config = OmegaConf.to_container(cfg, resolve=True)
        loggers = build_run_loggers(cfg.get("logger"))
        trainer = _build_trainer(cfg, checked, loggers)
        adopt_hydra_launcher(trainer)
        if trainer.is_global_zero:
            log.info(describe_batch(trainer, datamodule.max_tokens))
        model_config = resolve_model_config(
            cfg.model if pretrained is None else pretrained_model_config(pretrained, cfg.model),
            datamodule.vocab_size,
            datamodule.pad_id,
            datamodule.max_len,
        )
        if resume_from is not None:
            require_checkpoint_tokenizer(resume_from, datamodule)
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
            tokenizer_identity=tokenizer_identity(datamodule.tokenizer),
        )
        if pretrained is not None:
            module.model.load_state_dict(pretrained.model.state_dict())
            log.info("initialised the model from %s", cfg.init_from)
        for logger in loggers:
            logger.log_hyperparams(run_config)
            if overrides:  # the job's axes as config keys, for W&B's grouping views
                logger.log_hyperparams({"overrides": override_values(overrides)})
        fit_started = time.perf_counter()
        trainer.fit(module, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))
        fit_time_s = time.perf_counter() - fit_started
        metrics = finite_metrics(trainer.callback_metrics)
        if not trainer.interrupted:
            metrics.update(
                final_evaluation(trainer, module, datamodule, checked.final_eval, checked.search)
            )
        wait_for_children(trainer)
        status = "interrupted" if trainer.interrupted else "finished"
    except BaseException as exception:
        error = f"{type(exception).__name__}: {exception}"
        raise
    finally:
        finish_loggers(loggers, status == "finished")
        if _is_global_zero(trainer):
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
            _write_summary(cfg.output_dir, summary)
    log.info(
        "rank %d of %d finished at step %d; checkpoints in %s/checkpoints",
        trainer.global_rank,
        trainer.world_size,
        trainer.global_step,
        cfg.output_dir,
    )
    best = [c.best_model_score for c in trainer.callbacks if isinstance(c, ModelCheckpoint)]
    return float(best[0]) if best and best[0] is not None else None


def _build_trainer(cfg: DictConfig, checked: TrainConfig, loggers: list) -> pl.Trainer:
    try:
        return pl.Trainer(
            **checked.trainer,
            logger=loggers,
            callbacks=checked.callbacks,
            plugins=[AtomicCheckpointIO()],
            use_distributed_sampler=False,  # the data module shards its token-bucketed batches
            default_root_dir=cfg.output_dir,
        )
    except (MisconfigurationException, ValueError) as error:
        raise UsageError(f"trainer: {error}") from error


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


def _is_global_zero(trainer: pl.Trainer | None) -> bool:
    """Whether this process is rank 0 (before the trainer exists: from the environment)."""
    return trainer.is_global_zero if trainer is not None else rank_zero_only.rank == 0


def _write_summary(output_dir: str, summary: dict) -> None:
    """Write summary.json, unless the output directory is what failed (the error says so)."""
    try:
        write_summary(output_dir, summary)
    except OSError as error:
        log.warning("could not write summary.json into %s: %s", output_dir, error)
