"""A command-line override of a key that does not exist ends with one ``error:`` line naming
the nearest existing key (``model.n_head=4``: did you mean ``model.n_heads=4``?), instead of
Hydra's advice to add the key with ``+``. The scripts at the repository root run their
``@hydra.main`` function inside :func:`clear_override_errors`; it imports nothing heavy, so
``--help`` stays fast."""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import sys
from collections.abc import Iterator

from transformer_nmt.private_api import hydra_errors_seen_first_by

_APPEND_ADVICE = re.compile(r"To append to your config use \+(?P<override>\S+)")


@contextlib.contextmanager
def clear_override_errors() -> Iterator[None]:
    """Within the context an override of an unknown key prints one ``error:`` line to stderr
    and exits with status 1 (``HYDRA_FULL_ERROR=1`` keeps Hydra's traceback)."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        yield
        return
    with hydra_errors_seen_first_by(_exit_on_unknown_key):
        yield


def _exit_on_unknown_key(error: Exception) -> None:
    message = unknown_key_message(error)
    if message is not None:
        print(f"error: {message}", file=sys.stderr)
        sys.exit(1)


def unknown_key_message(error: BaseException) -> str | None:
    """What to tell the user when ``error`` is Hydra's failure to override a key that does not
    exist; None for any other error."""
    from omegaconf import DictConfig
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    cause = error.__cause__
    advice = _APPEND_ADVICE.search(str(error))
    if not isinstance(cause, ConfigAttributeError | ConfigKeyError) or advice is None:
        return None
    parent, key = cause.parent_node, str(cause.key)
    if not isinstance(parent, DictConfig) or cause.full_key is None:
        return None
    full_key = str(cause.full_key)
    place = full_key.rpartition(".")[0]
    override = advice["override"]  # the user's override, e.g. model.n_head=4
    where = f"no key {key!r} in {place}" if place else f"no top-level key {key!r}"
    keys = [str(name) for name in parent]
    nearest = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
    if nearest:
        suggestion = override.replace(full_key, f"{place}.{nearest[0]}" if place else nearest[0], 1)
        return f"{where}: did you mean {suggestion}?"
    return f"{where} (its keys: {', '.join(keys)}); +{override} adds a new key"
