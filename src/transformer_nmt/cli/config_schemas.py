"""The typed schemas behind ``conf/``: each dataclass's defaults are the only defaults.

Registered in Hydra's ConfigStore as ``schema/<name>``; a YAML option starts from one with
``defaults: [/schema/<name>@_here_]`` and sets only what differs. Values are then type-checked on
the command line (``model.n_heads=four`` fails), an unknown key is an error naming the schema,
and ``OmegaConf.to_object(cfg.<node>)`` gives the dataclass itself. The one resolver ``conf/``
uses, ``${metric_direction:<metric>}`` (minimize or maximize), is registered with them.
"""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

from transformer_nmt.data.config import DataConfig
from transformer_nmt.decoding.options import SearchOptions
from transformer_nmt.evaluation.final_eval import FinalEvalConfig
from transformer_nmt.model.config import TransformerConfig
from transformer_nmt.tracking.objective import register_direction_resolver
from transformer_nmt.training.optimizer import AdamConfig
from transformer_nmt.training.schedules import StepSchedule

SCHEMAS = {
    "model": TransformerConfig,
    "data": DataConfig,
    "search": SearchOptions,
    "optimizer": AdamConfig,
    "scheduler": StepSchedule,
    "final_eval": FinalEvalConfig,
}


def register_config_schemas() -> None:
    """Put every schema into Hydra's ConfigStore, and the resolver into OmegaConf (idempotent)."""
    store = ConfigStore.instance()
    for name, schema in SCHEMAS.items():
        store.store(group="schema", name=name, node=schema)
    register_direction_resolver()
