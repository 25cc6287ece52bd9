"""The command-line overrides that define a Hydra job (for ``summary.json`` and W&B configs)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback


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


SWEEP_OVERRIDES_FILE = "sweep_overrides.yaml"


def job_name(hydra: Any) -> str | None:
    """A multirun job's name made of the keys its sweep varies, ``model.n_heads=4,positional=
    learned``: the job's own overrides (``hydra.overrides.task``) less those every job shares.
    None when the sweep varies none of them.
    """
    swept = sweep_parameters(hydra)
    task = list(hydra.overrides.task)
    name = ",".join(o for key, o in zip(_keys(task), task, strict=True) if key in swept)
    return name or None


def sweep_parameters(hydra: Any) -> set[str]:
    """The keys a Hydra sweep varies: those with a sweep value (``1,4,8``, ``choice(...)``,
    ``interval(...)``, ``range(...)``) in ``hydra.sweeper.params`` (an ``ablation`` or
    ``hparams_search`` config, Optuna's search space) or on the sweep's command line (saved by
    :class:`SaveSweepOverrides`), the command line winning for a key in both."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    arguments = [f"{key}={value}" for key, value in (hydra.sweeper.get("params") or {}).items()]
    saved = sweep_dir_of(hydra) / SWEEP_OVERRIDES_FILE
    if saved.is_file():
        import yaml

        arguments += list(yaml.safe_load(saved.read_text()) or [])
    parser, sweeps = OverridesParser.create(), {}
    for argument in arguments:
        try:
            (override,) = parser.parse_overrides([argument])
        except HydraException:
            continue
        sweeps[override.key_or_group] = override.is_sweep_override()
    return {key for key, is_sweep in sweeps.items() if is_sweep}


class SaveSweepOverrides(Callback):
    """A Hydra callback (``hydra.callbacks`` in ``conf/train.yaml``): when a multirun starts, it
    writes the command line's overrides to ``<sweep dir>/sweep_overrides.yaml``, so each job can
    tell the keys the sweep varies from those all jobs share (a job sees only its own values)."""

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        from omegaconf import OmegaConf

        from transformer_nmt.atomic import write_text_atomically

        sweep_dir = sweep_dir_of(config.hydra)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        overrides = OmegaConf.to_yaml(OmegaConf.create(list(config.hydra.overrides.task)))
        write_text_atomically(sweep_dir / SWEEP_OVERRIDES_FILE, overrides)


def sweep_dir_of(hydra: Any) -> Path:
    """The sweep directory of a Hydra config, absolute (relative ones are under the launch cwd)."""
    sweep_dir = Path(str(hydra.sweep.dir))
    if sweep_dir.is_absolute() or not hydra.runtime.get("cwd"):
        return sweep_dir
    return Path(str(hydra.runtime.cwd)) / sweep_dir


def _keys(overrides: Sequence[str]) -> list[str]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return [o.key_or_group for o in OverridesParser.create().parse_overrides(list(overrides))]
