"""``python train.py``: data, model, loggers and trainer from the composed config, then fit."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from hydra.utils import instantiate
from lightning.pytorch.callbacks import Callback, ModelCheckpoint, ModelSummary, ProgressBar
from omegaconf import DictConfig, OmegaConf

from transformer_nmt.callbacks import LastCheckpoint
from transformer_nmt.checkpoint import AtomicCheckpointIO
from transformer_nmt.cli.errors import UsageError
from transformer_nmt.cli.library_notices import silence_library_notices
from transformer_nmt.data.datamodule import TranslationDataModule
from transformer_nmt.evaluation.final_eval import FinalEvalConfig, final_evaluation
from transformer_nmt.launch.ddp import adopt_hydra_launcher, distributed_job, wait_for_children
from transformer_nmt.launch.host_memory import keep_freed_memory
from transformer_nmt.launch.requeue import RequeueOnSignal, submitit_handler
from transformer_nmt.model import TransformerConfig
from transformer_nmt.private_api import offer_to_model_checkpoint
from transformer_nmt.tracking.loggers import (
    LoggedMetrics,
    build_loggers,
    finish_loggers,
    log_final_hyperparameters,
)
from transformer_nmt.tracking.objective import DECODED, final_eval_for, objective_value
from transformer_nmt.tracking.overrides import job_overrides, override_values
from transformer_nmt.tracking.summary import run_summary, write_summary
from transformer_nmt.training.module import TranslationModule

log = logging.getLogger(__name__)

RESUME_MODES = ("auto", "never")


def train(cfg: DictConfig) -> float | None:
    """Fit the model ``cfg`` describes; returns the final evaluation's ``optimized_metric`` (what
    Hydra's sweepers optimise; None when it is null)."""
    with distributed_job():
        return _fit(cfg)


def _fit(cfg: DictConfig) -> float | None:
    started = time.perf_counter()
    silence_library_notices()
    objective = cfg.get("optimized_metric")
    final_eval = final_eval_for(objective, OmegaConf.to_object(cfg.final_eval))  # checks it early
    resume_mode(cfg.get("resume"))  # and this
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
        optimizer=OmegaConf.to_container(cfg.optimizer, resolve=True),
        scheduler=OmegaConf.to_container(cfg.scheduler, resolve=True),
        compile=bool(cfg.compile),
        run_config=run_config,
    )
    options = trainer_options(cfg.trainer)
    loggers = build_loggers(cfg.get("logger"))
    logged = LoggedMetrics()  # what summary.json reports: the loggers' last values and steps
    callbacks = build_callbacks(
        cfg.get("callbacks"),
        options.get("enable_progress_bar", True),
        options.get("enable_model_summary", True),
    )
    requeue = RequeueOnSignal(submitit_handler()) if _submitit_launcher() else None
    trainer = pl.Trainer(
        **{**options, "enable_model_summary": False},  # the callbacks hold the summary, if on
        logger=[*loggers, logged],
        callbacks=[*callbacks, requeue] if requeue else callbacks,
        plugins=[AtomicCheckpointIO()],
        use_distributed_sampler=False,  # the data module shards its own token-bucketed batches
        default_root_dir=cfg.output_dir,
    )
    adopt_hydra_launcher(trainer)
    ckpt_path = resume_checkpoint(cfg, callbacks)
    overrides = job_overrides()
    hyperparameters = {**run_config, "params": module.model.num_parameters()}
    status, error, final, fit_time_s = "failed", None, {}, None
    try:
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
            search = OmegaConf.to_object(cfg.search)
            final = final_evaluation(trainer, module, datamodule, final_eval, search)
            offer_final_validation(trainer, final, final_eval)
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
        if trainer.is_global_zero:
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
            write_summary(cfg.output_dir, summary)
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
    return objective_value(objective, final)


def resume_checkpoint(cfg: DictConfig, callbacks: list[Callback]) -> str | None:
    """The checkpoint ``fit`` starts from: ``ckpt_path`` if set; else, with ``resume=auto``, the run
    directory's ``last.ckpt`` if one exists (a requeued or restarted job continues)."""
    if cfg.get("ckpt_path"):
        return str(cfg.ckpt_path)
    if resume_mode(cfg.get("resume")) == "never":
        return None
    last = next((c.path for c in callbacks if isinstance(c, LastCheckpoint)), None)
    last = last or Path(cfg.output_dir) / "checkpoints" / "last.ckpt"
    if not last.is_file():
        return None
    log.info("resuming from %s (resume=auto)", last)
    return str(last)


def resume_mode(value: Any) -> str:
    """``auto`` or ``never`` from ``resume`` (booleans too); null means ``auto`` under the submitit
    launchers (``hydra/launcher=slurm|local``), whose jobs are requeued, and ``never`` otherwise."""
    if value is None:
        return "auto" if _submitit_launcher() else "never"
    if isinstance(value, bool):
        return "auto" if value else "never"
    if value not in RESUME_MODES:
        raise UsageError(f"resume={value} is not an option; use resume=auto or resume=never")
    return value


def _submitit_launcher() -> bool:
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return False
    return "hydra_submitit_launcher" in str(HydraConfig.get().launcher.get("_target_", ""))


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
    """``Trainer`` keyword arguments from the ``trainer`` group."""
    options = OmegaConf.to_container(trainer_cfg, resolve=True)
    if "use_distributed_sampler" in options:
        raise ValueError(
            "remove trainer.use_distributed_sampler: it is always False, because the data "
            "module shards its token-bucketed batches across ranks itself"
        )
    return options


def build_callbacks(
    callbacks_cfg: Any, enable_progress_bar: bool = True, enable_model_summary: bool = True
) -> list[Callback]:
    """Instantiate every non-null entry of ``callbacks`` (progress bars and the model summary only
    if the trainer enables them)."""
    specs = (callbacks_cfg or {}).values()
    # _convert_="object": the ``search`` node they take becomes a SearchOptions
    callbacks = [instantiate(spec, _convert_="object") for spec in specs if spec is not None]
    if not enable_progress_bar:
        callbacks = [c for c in callbacks if not isinstance(c, ProgressBar)]
    if not enable_model_summary:
        callbacks = [c for c in callbacks if not isinstance(c, ModelSummary)]
    return callbacks
