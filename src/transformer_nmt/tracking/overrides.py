"""The command-line overrides that define a Hydra job (for ``summary.json`` and W&B configs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def job_overrides() -> list[str]:
    """The current job's own overrides (``hydra.overrides.task``); [] outside a Hydra job."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    return list(HydraConfig.get().overrides.task)


def override_values(overrides: Sequence[str]) -> dict[str, Any]:
    """``{"model": "prenorm", "model.n_heads": 4}`` from ``["model=prenorm", "model.n_heads=4"]``.

    Values are parsed as Hydra parses them (numbers, booleans, lists, quoted strings); keys keep
    their ``+``/``++``/``~`` prefix off, so the same axis has one key however it was set.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(overrides))
    return {override.key_or_group: _plain(override.value()) for override in parsed}


def _plain(value: Any) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
