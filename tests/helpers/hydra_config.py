"""``conf/`` composed in-process, with the config schemas ``train.py`` registers."""

from hydra import compose, initialize_config_dir

from transformer_nmt.cli.config_schemas import register_config_schemas

from . import REPO_ROOT

CONF_DIR = REPO_ROOT / "conf"


def compose_config(*overrides: str, return_hydra_config: bool = False):
    """The ``train`` config with ``overrides``; with ``return_hydra_config``, its ``hydra`` node."""
    register_config_schemas()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("train", overrides=list(overrides), return_hydra_config=return_hydra_config)


def conf_options(group: str) -> list[str]:
    """The options of a config group: the names of ``conf/<group>/*.yaml``, sorted."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
