"""``python train.py``: data, model, loggers and trainer from the composed config, then fit."""

from __future__ import annotations

import logging
import time

import lightning.pytorch as pl
import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from transformer_nmt.checkpoint import AtomicCheckpointIO
from transformer_nmt.data import tokenizer_identity
from transformer_nmt.data.datamodule import TranslationDataModule
from transformer_nmt.evaluation.final_eval import FinalEvalConfig, final_evaluation
from transformer_nmt.host_memory import keep_freed_memory
from transformer_nmt.launch.ddp import adopt_hydra_launcher, distributed_job, wait_for_children
from transformer_nmt.launch.requeue import RequeueOnSignal, submitit_handler, under_submitit
from transformer_nmt.private_api import offer_to_model_checkpoint
from transformer_nmt.tracking.loggers import (
    LoggedMetrics,
    finish_loggers,
    log_final_hyperparameters,
)
from transformer_nmt.tracking.objective import DECODED, objective_value
from transformer_nmt.tracking.overrides import job_overrides, override_values
from transformer_nmt.tracking.summary import run_summary, write_summary
from transformer_nmt.training.module import TranslationModule

from .errors import UsageError
from .library_notices import silence_library_notices
from .loading import check_beam_size
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
    resume_checkpoint,
)

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> float | None:
    """Fit the model ``cfg`` describes; returns the final evaluation's ``optimized_metric`` (what
    Hydra's sweepers optimise; None when it is null)."""
    with distributed_job():
        return _fit(cfg)


def _fit(cfg: DictConfig) -> float | None:
    started = time.perf_counter()
    silence_library_notices()
    overrides = job_overrides()
    logged = LoggedMetrics()  # what summary.json reports: the loggers' last values and steps
    trainer, module, loggers, requeue = None, None, [], None
    status, error, final, fit_time_s = "failed", None, {}, None
    try:
        if cfg.get("keep_freed_host_memory", False) and keep_freed_memory():
            log.info("glibc keeps freed memory in the heap (keep_freed_host_memory=true)")
        pl.seed_everything(cfg.seed, workers=True)
        # every check that needs no data first: reading the corpus or training a BPE takes long
        checked = check_config(cfg)
        pretrained = pretrained_model(cfg.get("init_from"), checked.data)
        datamodule = TranslationDataModule(data_config(checked.data, pretrained))
        check_writable_outputs(cfg.output_dir, checked.callbacks)
        ckpt_path = resume_checkpoint(cfg, checked.callbacks)
        resume_from = read_resume_checkpoint(cfg, checked.model, ckpt_path)
        run_config = OmegaConf.to_container(cfg, resolve=True)
        loggers = build_run_loggers(cfg.get("logger"))
        requeue = RequeueOnSignal(submitit_handler()) if under_submitit() else None
        callbacks = [*checked.callbacks, requeue] if requeue else checked.callbacks
        trainer = _build_trainer(cfg, checked, [*loggers, logged], callbacks)
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
        # `search` (the final evaluation, BLEU callbacks) must fit the model: check before training
        check_beam_size(checked.search, module.model, datamodule.bos_id, datamodule.eos_id)
        if pretrained is not None:
            module.model.load_state_dict(pretrained.model.state_dict())
            log.info("initialised the model from %s", cfg.init_from)
        hyperparameters = {**run_config, "params": module.model.num_parameters()}
        for logger in loggers:
            logger.log_hyperparams(hyperparameters)
            if overrides:  # the job's axes as config keys, for W&B's grouping views
                logger.log_hyperparams({"overrides": override_values(overrides)})
        fit_started = time.perf_counter()
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
        fit_time_s = time.perf_counter() - fit_started
        if requeue is not None and requeue.requested:
            status = "requeued"
        elif not trainer.interrupted:
            if trainer.is_global_zero and (
                warning := module.schedule.unfinished_cooldown(trainer.global_step)
            ):
                log.warning(warning)
            final = final_evaluation(
                trainer, module, datamodule, checked.final_eval, checked.search
            )
            offer_final_validation(trainer, final, checked.final_eval)
            if trainer.is_global_zero:
                names = [name for name, value in final.items() if value is not None]
                log_final_hyperparameters(loggers, hyperparameters, names)
            status = "finished"
        else:
            status = "interrupted"
        wait_for_children(trainer)
    except BaseException as exception:
        status, error = "failed", f"{type(exception).__name__}: {exception}"
        raise
    finally:
        finish_loggers(loggers, status == "finished")
        if _is_global_zero(trainer):
            summary = run_summary(
                trainer,
                module,
                status,
                error,
                metrics=logged,
                overrides=overrides,
                wall_time_s=time.perf_counter() - started,
                fit_time_s=fit_time_s,
            )
            _write_summary(cfg.output_dir, summary)
    log.info(
        "rank %d of %d %s at step %d; checkpoints in %s/checkpoints",
        trainer.global_rank,
        trainer.world_size,
        status,
        trainer.global_step,
        cfg.output_dir,
    )
    if status == "requeued":
        requeue.requeue()  # rank 0: submitit requeues the job and exits this process
        return None
    return objective_value(cfg.get("optimized_metric"), final)


def _build_trainer(
    cfg: DictConfig, checked: TrainConfig, loggers: list, callbacks: list[Callback]
) -> pl.Trainer:
    try:
        return pl.Trainer(
            **{**checked.trainer, "enable_model_summary": False},  # a callback holds the summary
            logger=loggers,
            callbacks=callbacks,
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


def offer_final_validation(
    trainer: pl.Trainer, metrics: dict[str, float | None], config: FinalEvalConfig
) -> None:
    """Count the final evaluation as one more validation for each ``ModelCheckpoint`` monitoring a
    ``val/*`` value it produced, so ``best.ckpt`` exists even when no validation ran during fit.
    BLEU and chrF count only when decoded on the whole split (``final_eval.max_sentences=null``).
    """
    if trainer.fast_dev_run:  # Lightning writes no checkpoints then
        return
    for callback in trainer.checkpoint_callbacks:
        monitor = getattr(callback, "monitor", None)
        if not isinstance(callback, ModelCheckpoint) or not str(monitor).startswith("val/"):
            continue
        if metrics.get(monitor) is None:
            continue
        if monitor.split("/")[1] in DECODED and config.max_sentences is not None:
            continue
        offer_to_model_checkpoint(callback, trainer, {monitor: torch.tensor(metrics[monitor])})


def _is_global_zero(trainer: pl.Trainer | None) -> bool:
    """Whether this process is rank 0 (before the trainer exists: from the environment)."""
    return trainer.is_global_zero if trainer is not None else rank_zero_only.rank == 0


def _write_summary(output_dir: str, summary: dict) -> None:
    """Write summary.json, unless the output directory is what failed (the error says so)."""
    try:
        write_summary(output_dir, summary)
    except OSError as error:
        log.warning("could not write summary.json into %s: %s", output_dir, error)
