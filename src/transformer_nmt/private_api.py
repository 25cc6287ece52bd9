"""Every use of a private API of Lightning, Hydra, torch, datasets or W&B, in one place.

Each entry names what it reaches into and the versions it was checked against, so an upgrade
that breaks one breaks here, visibly. Checked with lightning 2.6.6, hydra-core 1.3.8,
torch 2.13.0, datasets 5.2.0 and wandb 0.31.0.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

# -- Lightning -----------------------------------------------------------------------------------


def __getattr__(name: str) -> Any:
    """``SubprocessScriptLauncher``: the launcher Lightning's ``ddp`` strategy uses to start ranks
    1..N-1 by re-running the script (``lightning.pytorch.strategies.launchers.subprocess_script.
    _SubprocessScriptLauncher``). ``launch.ddp.HydraJobLauncher`` subclasses it and overrides its
    ``_call_children_scripts`` method. Imported on first use: Lightning is slow to import.
    """
    if name == "SubprocessScriptLauncher":
        from lightning.pytorch.strategies.launchers import subprocess_script

        return subprocess_script._SubprocessScriptLauncher
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def plain_script_command() -> list[str]:
    """Lightning's command line for re-running the current script as another rank
    (``lightning.fabric.strategies.launchers.subprocess_script._basic_subprocess_cmd``)."""
    from lightning.fabric.strategies.launchers.subprocess_script import _basic_subprocess_cmd

    return list(_basic_subprocess_cmd())


def replace_launcher(strategy: Any, launcher: Any) -> None:
    """Install ``launcher`` on a strategy (``Strategy._launcher``; Lightning has no setter)."""
    strategy._launcher = launcher


@functools.cache
def csv_writer_keeping_its_directory() -> type:
    """Lightning's CSV ``ExperimentWriter`` without its ``_check_log_dir_exists``, which warns and
    deletes an existing ``metrics.csv`` when a logger starts in a directory already used (a run
    resumed in place); ``tracking.loggers.ResumableCSVLogger`` keeps the earlier rows instead."""
    from lightning.pytorch.loggers.csv_logs import ExperimentWriter

    class Writer(ExperimentWriter):
        def _check_log_dir_exists(self) -> None:
            pass

    return Writer


def offer_to_model_checkpoint(callback: Any, trainer: Any, metrics: dict) -> None:
    """Offer ``metrics`` (name -> tensor) to a ``ModelCheckpoint`` as a validation during fit would
    (``ModelCheckpoint._save_topk_checkpoint`` with ``_monitor_candidates``): it saves when its
    monitored value improves, and updates its best path and score."""
    callback._save_topk_checkpoint(trainer, {**callback._monitor_candidates(trainer), **metrics})


def tensorboard_file_writer(writer: Any) -> Any:
    """The event-file writer of a ``SummaryWriter`` (``_get_file_writer``), to add raw summaries
    such as the HParams plugin's, as Lightning's ``TensorBoardLogger.log_hyperparams`` does."""
    return writer._get_file_writer()


# -- torch ---------------------------------------------------------------------------------------


def batches_yielded(iterator: Any) -> int:
    """How many batches a ``DataLoader`` iterator has handed out, not counting what its workers
    prefetched (``torch.utils.data.dataloader._BaseDataLoaderIter._num_yielded``)."""
    return iterator._num_yielded


def multiply_tensors_(tensors: list[Any], factor: Any) -> None:
    """Multiply every tensor in place by ``factor`` (a number or a scalar tensor on their
    device), in one fused kernel per device and dtype (``torch._foreach_mul_``, which
    ``torch.nn.utils.clip_grad_norm_`` uses the same way)."""
    import torch

    if tensors:
        torch._foreach_mul_(tensors, factor)


def compiled_graphs() -> int:
    """Graphs ``torch.compile`` has compiled in this process so far (Dynamo's
    ``torch._dynamo.utils.counters["stats"]["unique_graphs"]``)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


# -- datasets ------------------------------------------------------------------------------------


def dataset_fingerprint(dataset: Any) -> str:
    """The content hash ``datasets`` keeps for a ``Dataset`` (``Dataset._fingerprint``)."""
    return dataset._fingerprint


# -- Hydra ---------------------------------------------------------------------------------------


def basic_sweeper_jobs(parsed_overrides: list) -> list[list[str]]:
    """The jobs Hydra's basic sweeper makes of parsed sweep overrides, as override lists
    (``hydra._internal.core_plugins.basic_sweeper.BasicSweeper.split_arguments``)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return BasicSweeper.split_arguments(parsed_overrides, max_batch_size=None)[0]


@contextlib.contextmanager
def hydra_errors_seen_first_by(report: Callable[[Exception], None]) -> Iterator[None]:
    """Within the context, ``report(error)`` sees every error Hydra reports itself (composing the
    config, running the job) before Hydra prints it and exits (``hydra._internal.utils.
    run_and_report``, called by ``hydra.main``); ``report`` may print its own message and exit."""
    from hydra._internal import utils

    hydra_run_and_report = utils.run_and_report

    def run_and_report(func: Callable[[], Any]) -> Any:
        def reported() -> Any:
            try:
                return func()
            except Exception as error:
                report(error)
                raise

        return hydra_run_and_report(reported)

    utils.run_and_report = run_and_report
    try:
        yield
    finally:
        utils.run_and_report = hydra_run_and_report


# -- submitit and hydra-submitit-launcher ------------------------------------------------------


def submitit_task_script() -> str:
    """The script whose Hydra task function a submitit job runs (its process is
    ``python -m submitit.core._submit``): the file that defined ``task_function`` of the
    ``BaseSubmititLauncher`` pickled as the job's call (``DelayedSubmission.load`` of
    ``JobEnvironment().paths.submitted_pickle``; checked with submitit 1.5.4,
    hydra-submitit-launcher 1.2.0 and cloudpickle 3.1.1-3.1.3). cloudpickle pickles a script's
    function by value with its module's ``__file__`` among the globals it keeps; the code's own
    ``co_filename`` it keeps only before 3.1.3 (after: ``"<dynamic-code>"``)."""
    import submitit
    from submitit.helpers import DelayedSubmission

    delayed = DelayedSubmission.load(submitit.JobEnvironment().paths.submitted_pickle)
    task_function = delayed.function.task_function
    return task_function.__globals__.get("__file__") or task_function.__code__.co_filename


# -- W&B through Lightning's WandbLogger ---------------------------------------------------------


def wandb_init_options(logger: Any) -> dict:
    """The keyword arguments ``WandbLogger`` passes to ``wandb.init`` (``_wandb_init``);
    mutable, read when the run starts."""
    return logger._wandb_init


def wandb_run(logger: Any) -> Any:
    """The W&B run a ``WandbLogger`` has started, or None (``_experiment``)."""
    return logger._experiment


def forget_wandb_run(logger: Any) -> None:
    """Make a ``WandbLogger`` start a new run on next use (``_experiment = None``)."""
    logger._experiment = None
