"""Problems a user can fix end a command with one ``error: …`` line and exit status 1.

The traceback still goes to the job's log file (``train.log``, ``evaluate.log``) where Hydra
writes one. In a multirun the failing job is recorded as failed and the sweep goes on with its
other jobs; the sweep then exits with status 1, naming the first failed job. Any other exception
(a bug) keeps its traceback.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import TypeVar

from hydra.errors import CompactHydraException
from omegaconf import DictConfig, MissingMandatoryValue

from transformer_nmt.atomic import WriteError
from transformer_nmt.checkpoint import CheckpointError
from transformer_nmt.data import DataError
from transformer_nmt.export.errors import (
    ExportOutputError,
    MissingDependencyError,
    UnsupportedModelError,
)
from transformer_nmt.launch.run_directory import RunDirectoryBusy
from transformer_nmt.tracking.objective import ObjectiveError
from transformer_nmt.training.loss import NonFiniteLossError

log = logging.getLogger(__name__)
Result = TypeVar("Result")


class UsageError(ValueError):
    """A command-line option is missing or invalid; the message says which and how to fix it."""


class InputError(ValueError):
    """The text a command reads cannot be used; the message names the line and the fix."""


class JobFailed(CompactHydraException):
    """A job of a multirun stopped on a user error (Hydra prints just this message at the end)."""


USER_ERRORS = (
    CheckpointError,
    DataError,
    UsageError,
    InputError,
    MissingMandatoryValue,
    UnsupportedModelError,
    MissingDependencyError,
    FileExistsError,
    ObjectiveError,
    NonFiniteLossError,  # the run diverged: the message says what to change and how to resume
    RunDirectoryBusy,
    ExportOutputError,
    WriteError,  # a full disk, a read-only filesystem: the message names the path and the space
)


def exit_on_user_error(command: Callable[[DictConfig], Result], cfg: DictConfig) -> Result:
    """Run ``command(cfg)``; a problem the user can fix prints one ``error: …`` line to stderr
    (and its traceback to the job's log file) and exits with status 1 instead of a traceback; in
    a multirun it fails just this job.
    """
    try:
        return command(cfg)
    except USER_ERRORS as error:
        if not isinstance(error, RunDirectoryBusy):  # its log file is another run's
            _log_traceback_to_files(error)
        print(f"error: {error}", file=sys.stderr)
        if _in_multirun():
            raise JobFailed(f"error: {error}") from error
        sys.exit(1)


def _log_traceback_to_files(error: BaseException) -> None:
    """Write ``error`` with its traceback to the log files only (the console gets one line)."""
    record = log.makeRecord(
        log.name, logging.ERROR, __file__, 0, "error: %s", (error,),
        (type(error), error, error.__traceback__),
    )  # fmt: skip
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


def _in_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
