"""``python train.py``: data, model, loggers and trainer from the composed config, then fit."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from hydra.utils import instantiate
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from transformer_nmt.callbacks import LastCheckpoint
from transformer_nmt.checkpoint import AtomicCheckpointIO
from transformer_nmt.data import DataConfig, tokenizer_identity
from transformer_nmt.data.datamodule import TranslationDataModule
from transformer_nmt.evaluation.final_eval import FinalEvalConfig, final_evaluation
from transformer_nmt.host_memory import keep_freed_memory
from transformer_nmt.launch.ddp import adopt_hydra_launcher, distributed_job, wait_for_children
from transformer_nmt.launch.requeue import (
    SignalReceived,
    StopOnSignal,
    submitit_handler,
    submitit_signal,
    under_submitit,
)
from transformer_nmt.launch.run_directory import RunDirectoryBusy, claim_for_new_run, owning
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
    ResumePlan,
    TrainConfig,
    build_model_config,
    build_run_loggers,
    check_config,
    check_writable_outputs,
    data_config,
    plan_resume,
    pretrained_model,
    pretrained_model_config,
)

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> float | None:
    """Fit the model ``cfg`` describes; returns the final evaluation's ``optimized_metric`` (what
    Hydra's sweepers optimise; None when it is null)."""
    with distributed_job():
        return _fit(cfg)


def _fit(cfg: DictConfig) -> float | None:
    with owning_run_directory(cfg.output_dir):  # first: a refused run writes nothing there
        silence_library_notices()
        if cfg.get("keep_freed_host_memory", False):
            keep_freed_memory()  # says what it did at DEBUG level
        pl.seed_everything(cfg.seed, workers=True)
        job = TrainingJob(cfg)
        with job.stop.handling_signals():
            try:
                job.build()
                job.fit()
                job.finish()
            except SignalReceived:  # outside training: nothing more to save
                job.status = "interrupted"
            except RunDirectoryBusy:  # the summary.json there is another run's
                job.status = "refused"
                raise
            except BaseException as exception:
                job.status, job.error = "failed", f"{type(exception).__name__}: {exception}"
                raise
            finally:
                job.stop.closing()
                job.close()
    if job.status == "requeued":
        job.stop.requeue()  # rank 0: submitit requeues the job and exits this process
        return None
    if job.status == "interrupted" and job.stop.signum is not None:
        if job.is_global_zero:
            raise SystemExit(job.stop.exit_status())
        return None
    return objective_value(cfg.get("optimized_metric"), job.final)


@dataclass
class TrainingJob:
    """One run of ``train.py``: what it is built from, what it built, and how it ended."""

    cfg: DictConfig
    started: float = field(default_factory=time.perf_counter)
    overrides: list[str] = field(default_factory=job_overrides)
    logged: LoggedMetrics = field(default_factory=LoggedMetrics)  # what summary.json reports
    checked: TrainConfig | None = None
    datamodule: TranslationDataModule | None = None
    resume: ResumePlan | None = None
    loggers: list[Logger] = field(default_factory=list)
    stop: StopOnSignal = field(default_factory=lambda: stop_on_signal())
    trainer: pl.Trainer | None = None
    module: TranslationModule | None = None
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    status: str = "failed"
    error: str | None = None
    fit_time_s: float | None = None
    final: dict[str, float | None] = field(default_factory=dict)

    def build(self) -> None:
        """Check the config, then build the data module, trainer and module, in that order:
        every check that needs no data first, since reading the corpus or training a BPE takes
        long."""
        cfg = self.cfg
        self.checked = checked = check_config(cfg)
        check_training_budget(checked.trainer)
        pretrained = pretrained_model(cfg.get("init_from"), checked.data)
        self.datamodule = datamodule = TranslationDataModule(data_config(checked.data, pretrained))
        check_writable_outputs(cfg.output_dir, checked.callbacks)
        self.resume = plan_resume(cfg, checked.model, checked.callbacks)
        if rank_zero_only.rank == 0:
            claim_for_new_run(
                cfg.output_dir,
                checkpoint_directories(checked.callbacks),
                self.resume.path if self.resume.ckpt_path not in ("last", "hpc") else None,
                bool(cfg.get("overwrite_run", False)),
                run_dir_option(),
            )
        self.loggers = build_run_loggers(cfg.get("logger"))
        self.trainer = self._build_trainer()
        if self.trainer.is_global_zero:
            log.info(describe_batch(self.trainer, datamodule.max_tokens))
        model_options = (
            checked.model if pretrained is None else pretrained_model_config(pretrained, cfg.model)
        )
        warn_about_vocabulary_size(checked.data, datamodule.vocab_size)
        model = build_model_config(model_options, datamodule.vocab_size, datamodule.pad_id)
        self.resume.require_tokenizer(datamodule)
        run_config = OmegaConf.to_container(cfg, resolve=True)
        del run_config["module"]  # its values are the top-level keys above
        self.module = instantiate(cfg.module, _convert_="all")(
            model_config=model.to_dict(),
            tokenizer_dir=datamodule.tokenizer_dir,
            src_lang=datamodule.src_lang,
            tgt_lang=datamodule.tgt_lang,
            bos_id=datamodule.bos_id,
            eos_id=datamodule.eos_id,
            pad_id=datamodule.pad_id,
            tokenizer_identity=tokenizer_identity(datamodule.tokenizer),
            run_config=run_config,
        )
        # `search` (the final evaluation, BLEU callbacks) must fit the model: check before training
        check_beam_size(checked.search, self.module.model, datamodule.bos_id, datamodule.eos_id)
        if pretrained is not None:
            self.module.model.load_state_dict(pretrained.model.state_dict())
            log.info("initialised the model from %s", cfg.init_from)
        self.hyperparameters = {**run_config, "params": self.module.model.num_parameters()}
        for logger in self.loggers:
            logger.log_hyperparams(self.hyperparameters)
            if self.overrides:  # the job's axes as config keys, for W&B's grouping views
                logger.log_hyperparams({"overrides": override_values(self.overrides)})

    def _build_trainer(self) -> pl.Trainer:
        callbacks = [*self.checked.callbacks, self.stop]
        try:
            trainer = pl.Trainer(
                **{**self.checked.trainer, "enable_model_summary": False},  # a callback has it
                logger=[*self.loggers, self.logged],
                callbacks=callbacks,
                plugins=[AtomicCheckpointIO()],
                use_distributed_sampler=False,  # the data module shards its token batches
                default_root_dir=self.cfg.output_dir,
            )
        except (MisconfigurationException, ValueError) as error:
            raise UsageError(f"trainer: {error}") from error
        adopt_hydra_launcher(trainer)
        return trainer

    def fit(self) -> None:
        fit_started = time.perf_counter()
        self.trainer.fit(self.module, datamodule=self.datamodule, ckpt_path=self.resume.ckpt_path)
        self.fit_time_s = time.perf_counter() - fit_started

    def finish(self) -> None:
        """The final evaluation (unless a signal stopped the fit or the fit was interrupted)."""
        trainer, checked = self.trainer, self.checked
        if self.stop.signum is not None:
            self.status = "requeued" if self.stop.requeues else "interrupted"
        elif not trainer.interrupted:
            if trainer.is_global_zero and (
                warning := self.module.schedule.unfinished_cooldown(trainer.global_step)
            ):
                log.warning(warning)
            self.final = final_evaluation(
                trainer, self.module, self.datamodule, checked.final_eval, checked.search
            )
            offer_final_validation(trainer, self.final, checked.final_eval)
            if trainer.is_global_zero:
                names = [name for name, value in self.final.items() if value is not None]
                log_final_hyperparameters(self.loggers, self.hyperparameters, names)
            self.status = "finished"
        else:
            self.status = "interrupted"
        wait_for_children(trainer)
        log.info(
            "rank %d of %d %s at step %d; checkpoints in %s/checkpoints",
            trainer.global_rank,
            trainer.world_size,
            self.status,
            trainer.global_step,
            self.cfg.output_dir,
        )

    @property
    def is_global_zero(self) -> bool:
        trainer = self.trainer
        return trainer.is_global_zero if trainer is not None else rank_zero_only.rank == 0

    def close(self) -> None:
        """Close the loggers and, on rank 0, write summary.json, however the job ended (unless
        the run directory holds another run's, which refused this one)."""
        finish_loggers(self.loggers, self.status == "finished")
        trainer = self.trainer
        if self.is_global_zero and self.status != "refused":
            summary = run_summary(
                trainer,
                self.module,
                self.status,
                self.error,
                metrics=self.logged,
                overrides=self.overrides,
                wall_time_s=time.perf_counter() - self.started,
                fit_time_s=self.fit_time_s,
                signum=self.stop.signum,
            )
            _write_summary(self.cfg.output_dir, summary)


@contextlib.contextmanager
def owning_run_directory(output_dir: str) -> Iterator[None]:
    """Hold the run directory's lock for the job (global rank 0; the other ranks write under
    its lock)."""
    if rank_zero_only.rank != 0:
        yield
        return
    with owning(output_dir):
        yield


def checkpoint_directories(callbacks: list) -> list[Path]:
    """The directories the run's checkpoint callbacks write into."""
    directories = []
    for callback in callbacks:
        if isinstance(callback, ModelCheckpoint) and callback.dirpath:
            directories.append(Path(callback.dirpath))
        elif isinstance(callback, LastCheckpoint):
            directories.append(callback.path.parent)
    return [d.absolute() for d in directories]


def run_dir_option() -> str:
    """The option that names a job's directory: ``hydra.sweep.dir`` in a multirun."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    multirun = HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
    return "hydra.sweep.dir" if multirun else "hydra.run.dir"


def check_training_budget(trainer_options: dict) -> None:
    """Refuse ``trainer.max_steps=0``: Lightning would write untrained checkpoints as if
    trained (-1 means no step limit: ``max_epochs`` or ``max_time`` ends the run)."""
    if trainer_options.get("max_steps") == 0 and not trainer_options.get("fast_dev_run"):
        raise UsageError(
            "trainer.max_steps=0 trains nothing, yet would write checkpoints as if trained; set "
            "a number of optimizer steps, or -1 to stop at trainer.max_epochs instead"
        )


def warn_about_vocabulary_size(data: DataConfig, vocab_size: int) -> None:
    """Warn when a trained BPE holds more types than ``data.vocab_size`` asked for: the corpus's
    characters and the special tokens alone outnumber it (the data module warns when a BPE falls
    far below it)."""
    if data.tokenizer == "bpe" and vocab_size > data.vocab_size:
        log.warning(
            "the joint BPE holds %d types, more than data.vocab_size=%d: its alphabet (every "
            "character of the training text) and the special tokens alone take that many; set "
            "data.vocab_size to at least %d for any merges",
            vocab_size,
            data.vocab_size,
            vocab_size,
        )


def stop_on_signal() -> StopOnSignal:
    """The job's :class:`StopOnSignal`: under a submitit launcher with its requeue signal."""
    if under_submitit():
        return StopOnSignal(submitit_signal(), submitit_handler())
    return StopOnSignal()


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


def _write_summary(output_dir: str, summary: dict) -> None:
    """Write summary.json, unless the output directory is what failed (the error says so)."""
    try:
        write_summary(output_dir, summary)
    except OSError as error:
        log.warning("could not write summary.json into %s: %s", output_dir, error)
