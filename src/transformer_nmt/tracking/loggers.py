"""Experiment loggers from the ``logger`` config group: a W&B logger that never blocks a run, a CSV
logger that keeps its rows when a run resumes in place, TensorBoard's HParams tab, and the
logger that remembers what ``summary.json`` reports, and a TensorBoard logger that writes one
event file per run, its steps only increasing.

W&B mode: ``logger.wandb.mode`` if set, else ``WANDB_MODE``, else ``online`` when credentials
exist (``WANDB_API_KEY``, an identity token file, or a netrc entry for the W&B host) and
``offline`` otherwise — so ``wandb.init`` never prompts for a login. An online start that fails
(no network, bad key) falls back to offline. Offline runs print one line saying how to upload.
"""

from __future__ import annotations

import csv
import functools
import logging
import netrc
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from hydra.utils import instantiate
from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger, WandbLogger

from transformer_nmt.atomic import write_file_atomically
from transformer_nmt.private_api import (
    csv_writer_keeping_its_directory,
    forget_wandb_run,
    tensorboard_file_writer,
    wandb_init_options,
    wandb_run,
)
from transformer_nmt.tracking.overrides import job_name

log = logging.getLogger(__name__)

_DEFAULT_WANDB_HOST = "https://api.wandb.ai"


def build_loggers(logger_cfg: Mapping[str, Any] | None) -> list[Logger]:
    """Instantiate every non-null entry of the ``logger`` mapping (name -> ``_target_`` spec)."""
    return [instantiate(spec) for spec in (logger_cfg or {}).values() if spec is not None]


def finish_loggers(loggers: list[Logger], success: bool) -> None:
    """Close the W&B run of this job, so the next job of a multirun starts its own, and the
    TensorBoard event file."""
    for logger in loggers:
        if isinstance(logger, ResilientWandbLogger):
            logger.finish(success)
        elif isinstance(logger, RunTensorBoardLogger):
            logger.close()


def wandb_mode(mode: str | None = None) -> str:
    """The W&B mode to use: explicit > ``WANDB_MODE`` > online with credentials > offline."""
    if mode:
        return mode
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    return "online" if has_wandb_credentials() else "offline"


def has_wandb_credentials() -> bool:
    """Whether W&B can authenticate without prompting (env key, token file or netrc entry)."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", _DEFAULT_WANDB_HOST)).hostname
    path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
    try:
        return bool(host) and netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def wandb_logger(
    project: str,
    save_dir: str,
    mode: str | None = None,
    group: str | None = None,
    name: str | None = None,
    *,
    init_timeout: float,
    **kwargs: Any,
) -> ResilientWandbLogger:
    """A W&B logger; ``group`` defaults to the Hydra sweep dir in a multirun and ``name`` to the
    job's overrides. Extra keyword arguments go to ``WandbLogger`` / ``wandb.init``.
    """
    import wandb

    if os.environ.get("WANDB_MODE") == "":
        del os.environ["WANDB_MODE"]  # wandb rejects an empty mode; treat it as unset
    default_group, default_name = _hydra_group_and_name()
    Path(save_dir).mkdir(parents=True, exist_ok=True)
    return ResilientWandbLogger(
        project=project,
        save_dir=save_dir,
        mode=wandb_mode(mode),
        group=group or default_group,
        name=name or default_name,
        settings=wandb.Settings(init_timeout=init_timeout),
        **kwargs,
    )


def _hydra_group_and_name() -> tuple[str | None, str | None]:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None, None
    hydra = HydraConfig.get()
    if hydra.mode == RunMode.MULTIRUN:
        return str(hydra.sweep.dir), job_name(hydra) or f"job{hydra.job.num}"
    return None, hydra.job.override_dirname or None


class ResilientWandbLogger(WandbLogger):
    """``WandbLogger`` that retries offline when an online start fails, and says how to sync."""

    @property
    @rank_zero_experiment
    def experiment(self):
        if wandb_run(self) is None:
            options = wandb_init_options(self)
            if options.get("anonymous") is None:  # wandb >= 0.22 warns about it even when unset
                options.pop("anonymous", None)
            try:
                super().experiment  # noqa: B018 — starts the run
            except Exception as error:  # wandb raises several types for network/auth trouble
                if options.get("mode") == "offline":
                    raise
                log.warning("W&B: could not start an online run (%s); logging offline", error)
                options["mode"] = "offline"
                super().experiment  # noqa: B018
            if options.get("mode") == "offline":
                run_dir = Path(wandb_run(self).dir).parent
                log.info("W&B: offline run in %s; upload with `wandb sync %s`", run_dir, run_dir)
        return wandb_run(self)

    def finish(self, success: bool) -> None:
        """Finish the run (rank 0; no-op if it never started)."""
        run = wandb_run(self)
        if run is not None and hasattr(run, "finish"):
            run.finish(exit_code=0 if success else 1)
            forget_wandb_run(self)


class RunTensorBoardLogger(TensorBoardLogger):
    """Lightning's ``TensorBoardLogger`` writing one event file per run, whose steps never go
    back (``tensorboard --inspect`` finds them in order).

    Lightning closes the writer at the end of every ``fit``, ``validate`` and ``test``, and the
    next value opens another event file: the final evaluation would write two more. This logger
    only flushes there; :func:`finish_loggers` closes it. Lightning logs a validation during fit
    at the index of the step it follows (``global_step - 1``), callbacks such as the sample
    translations at ``global_step``: a value for a step before one already written is written
    at that latest step.
    """

    @property
    @rank_zero_experiment
    def experiment(self):
        if self._experiment is None:
            Path(self.log_dir).mkdir(parents=True, exist_ok=True)
            self._experiment = _monotonic_writer_class()(log_dir=self.log_dir, **self._kwargs)
        return self._experiment

    @rank_zero_only
    def finalize(self, status: str) -> None:
        if self._experiment is not None:
            self._experiment.flush()
        if status == "success":
            self.save()  # hparams.yaml, as Lightning's finalize writes it

    @rank_zero_only
    def close(self) -> None:
        """Close the event file (a later value would open a new one)."""
        if self._experiment is not None:
            self._experiment.close()
            self._experiment = None


@functools.cache
def _monotonic_writer_class() -> type:
    from torch.utils.tensorboard import SummaryWriter

    class MonotonicSummaryWriter(SummaryWriter):
        """Writes each scalar and text at its step, or at the latest step written if later."""

        latest_step = 0

        def _step(self, step: int | None) -> int | None:
            if step is not None:
                self.latest_step = step = max(step, self.latest_step)
            return step

        def add_scalar(self, tag, scalar_value, global_step=None, *args, **kwargs):
            super().add_scalar(tag, scalar_value, self._step(global_step), *args, **kwargs)

        def add_text(self, tag, text_string, global_step=None, *args, **kwargs):
            super().add_text(tag, text_string, self._step(global_step), *args, **kwargs)

    return MonotonicSummaryWriter


class LoggedMetrics(Logger):
    """A logger that keeps the last value and step of every metric logged to the run's loggers:
    what ``summary.json`` reports, so that it agrees with the other loggers' last points."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, float] = {}
        self.steps: dict[str, int | None] = {}

    @property
    def name(self) -> str:
        return "summary"

    @property
    def version(self) -> str:
        return ""

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        for key, value in metrics.items():
            self.values[key] = float(value)
            self.steps[key] = step

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass


class ResumableCSVLogger(CSVLogger):
    """Lightning's ``CSVLogger``, except in a directory that already holds a ``metrics.csv`` (a run
    resumed in place): Lightning would delete it; this logger keeps its rows up to the first step
    the new run logs, and writes the new rows after them, so the file stays one curve."""

    @property
    def experiment(self):
        if self._experiment is None and rank_zero_only.rank == 0:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _continuing_writer_class()(self.log_dir)
        return super().experiment


@functools.cache
def _continuing_writer_class() -> type:
    class ContinuingWriter(csv_writer_keeping_its_directory()):
        """Holds back a previous run's rows until its own first save, then keeps those logged
        before its first step (the resumed run logs the later ones again)."""

        def __init__(self, log_dir: str) -> None:
            super().__init__(log_dir)
            self._earlier = _read_csv(self.metrics_file_path)

        def save(self) -> None:
            if self._earlier is not None and self.metrics:
                header, rows = self._earlier
                first = min(int(m["step"]) for m in self.metrics)
                kept = [row for row in rows if _row_step(row) < first]

                def write(handle) -> None:
                    writer = csv.DictWriter(handle, fieldnames=header)
                    writer.writeheader()
                    writer.writerows(kept)

                write_file_atomically(self.metrics_file_path, write, binary=False)
                self.metrics_keys = list(header)
                self._earlier = None
            super().save()

    return ContinuingWriter


def _read_csv(path: str) -> tuple[list[str], list[dict[str, str]]] | None:
    if not os.path.isfile(path):
        return None
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


def _row_step(row: Mapping[str, str]) -> float:
    try:
        return float(row.get("step") or "inf")
    except ValueError:
        return float("inf")


def log_final_hyperparameters(
    loggers: list[Logger], hyperparameters: Mapping[str, Any], metric_names: list[str]
) -> None:
    """Fill TensorBoard's HParams tab: the run's hyper-parameters (flattened, ``model/d_model``)
    and its final metrics, whose values TensorBoard takes from their last logged points.

    Lightning writes the HParams summary only when ``log_hyperparams`` gets metrics, and then
    logs those metrics again at step 0; this writes the summary alone, once the metrics exist.
    Call on rank 0.
    """
    from torch.utils.tensorboard.summary import hparams

    flat = {key: _hparam_value(value) for key, value in _flatten(hyperparameters).items()}
    summaries = hparams(flat, dict.fromkeys(metric_names, 0.0))
    for logger in loggers:
        if isinstance(logger, TensorBoardLogger):
            writer = tensorboard_file_writer(logger.experiment)
            step = getattr(logger.experiment, "latest_step", None)  # after the run's values
            for summary in summaries:
                writer.add_summary(summary, step)
            logger.experiment.flush()


def _flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping) and value:
            flat.update(_flatten(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _hparam_value(value: Any) -> bool | int | float | str:
    return value if isinstance(value, bool | int | float | str) else str(value)
