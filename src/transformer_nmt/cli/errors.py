"""Problems a user can fix end a command with one ``error: …`` line and exit status 1."""

from __future__ import annotations

import sys
from collections.abc import Callable

from omegaconf import DictConfig, MissingMandatoryValue

from transformer_nmt.checkpoint import CheckpointError
from transformer_nmt.data import DataError
from transformer_nmt.export.errors import MissingDependencyError, UnsupportedModelError


class UsageError(ValueError):
    """A command-line option is missing or invalid; the message says which and how to fix it."""


USER_ERRORS = (
    CheckpointError,
    DataError,
    UsageError,
    MissingMandatoryValue,
    UnsupportedModelError,
    MissingDependencyError,
    FileExistsError,
)


def exit_on_user_error(command: Callable[[DictConfig], object], cfg: DictConfig) -> None:
    """Run ``command(cfg)``; a problem the user can fix prints one ``error: …`` line to stderr
    and exits with status 1 instead of a traceback.
    """
    try:
        command(cfg)
    except USER_ERRORS as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
