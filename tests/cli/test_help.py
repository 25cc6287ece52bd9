"""``--help`` of every Hydra command: its command lines, the groups a user sets with an example
each, and nothing of the typed schemas behind them; short enough to read on one screen."""

import pytest
from hydra import compose, initialize_config_dir

from tests.helpers.commands import run_script
from tests.helpers.hydra_config import CONF_DIR, conf_options
from transformer_nmt.cli.config_schemas import register_config_schemas

COMMANDS = {  # config name -> script
    "train": "train.py",
    "evaluate": "evaluate.py",
    "translate": "translate.py",
    "export": "export.py",
    "average": "average_checkpoints.py",
}
TRAIN_GROUPS = [
    "model", "data", "scheduler", "trainer", "callbacks", "logger", "experiment", "ablation",
    "hparams_search", "debug", "hydra/launcher",
]  # fmt: skip


def help_template(config_name: str) -> str:
    register_config_schemas()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name, return_hydra_config=True)
    return cfg.hydra.help.template


def test_train_help_names_every_group_and_option_with_an_example():
    template = help_template("train")
    listed = [line.split()[0] for line in template.splitlines() if line.startswith("  ")]
    user_groups = [p.name for p in CONF_DIR.iterdir() if p.is_dir() and p.name != "hydra"]
    assert sorted(TRAIN_GROUPS) == sorted([*user_groups, "hydra/launcher"])
    for group in TRAIN_GROUPS:
        assert group in listed, f"--help does not list the group {group}"
        for option in conf_options(group):
            assert option in template, f"--help does not name {group}={option}"
        example = "'callbacks=[" if group == "callbacks" else f"{group}="
        assert example in template, f"--help gives no example of {group}"
    assert "schema" not in template


@pytest.mark.parametrize("config_name", ["evaluate", "translate", "export", "average"])
def test_other_commands_help_shows_examples_and_their_keys(config_name):
    template = help_template(config_name)
    script = COMMANDS[config_name]
    assert template.count(f"python {script} ") >= 2  # command lines to copy
    assert "$CONFIG" in template and "$APP_CONFIG_GROUPS" not in template
    assert "schema" not in template


@pytest.mark.slow  # starts train.py
def test_train_help_prints_the_commands_and_groups_on_one_screen():
    result = run_script("train.py", "--help")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Train the Transformer")
    assert "python train.py -m" in result.stdout and "ablation" in result.stdout
    assert "schema" not in result.stdout and "powered by Hydra" not in result.stdout
    assert len(lines) <= 40
