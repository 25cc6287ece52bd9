"""Experiment loggers from the ``logger`` config group, and a W&B logger that never blocks a run.

W&B mode: ``logger.wandb.mode`` if set, else ``WANDB_MODE``, else ``online`` when credentials
exist (``WANDB_API_KEY``, an identity token file, or a netrc entry for the W&B host) and
``offline`` otherwise — so ``wandb.init`` never prompts for a login. An online start that fails
(no network, bad key) falls back to offline. Offline runs print one line saying how to upload.
"""

from __future__ import annotations

import logging
import netrc
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from hydra.utils import instantiate
from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.loggers import Logger, WandbLogger

from transformer_nmt.private_api import forget_wandb_run, wandb_init_options, wandb_run

log = logging.getLogger(__name__)

_DEFAULT_WANDB_HOST = "https://api.wandb.ai"


def build_loggers(logger_cfg: Mapping[str, Any] | None) -> list[Logger]:
    """Instantiate every non-null entry of the ``logger`` mapping (name -> ``_target_`` spec)."""
    return [instantiate(spec) for spec in (logger_cfg or {}).values() if spec is not None]


def finish_loggers(loggers: list[Logger], success: bool) -> None:
    """Close the W&B run of this job, so the next job of a multirun starts its own."""
    for logger in loggers:
        if isinstance(logger, ResilientWandbLogger):
            logger.finish(success)


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
    name = hydra.job.override_dirname or None
    if hydra.mode == RunMode.MULTIRUN:
        return str(hydra.sweep.dir), name or f"job{hydra.job.num}"
    return None, name


class ResilientWandbLogger(WandbLogger):
    """``WandbLogger`` that retries offline when an online start fails, and says how to sync."""

    @property
    @rank_zero_experiment
    def experiment(self):
        if wandb_run(self) is None:
            options = wandb_init_options(self)
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
