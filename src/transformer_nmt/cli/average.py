"""``python average_checkpoints.py``: average the weights of several checkpoints into one."""

from __future__ import annotations

import logging
from pathlib import Path

from hydra.utils import to_absolute_path
from omegaconf import DictConfig

from transformer_nmt.checkpoint import average_checkpoints, last_checkpoints

from .errors import UsageError
from .loading import log_to_stderr

log = logging.getLogger(__name__)


def average_command(cfg: DictConfig) -> Path:
    """Average ``inputs`` (or the ``last_n`` newest checkpoints of ``dir``) into ``output``."""
    log_to_stderr()
    if cfg.inputs:
        paths = [Path(to_absolute_path(str(p))) for p in cfg.inputs]
    elif cfg.dir and cfg.last_n:
        paths = last_checkpoints(to_absolute_path(cfg.dir), int(cfg.last_n))
    else:
        raise UsageError(
            "say which checkpoints to average: inputs='[a.ckpt,b.ckpt]', or dir=path/to/"
            "checkpoints last_n=5"
        )
    output = average_checkpoints(paths, to_absolute_path(cfg.output))
    log.info("averaged %s", ", ".join(p.name for p in paths))
    print(output)
    return output
