"""An override of a key that does not exist: one ``error:`` line naming the nearest key."""

import pytest
from hydra.errors import ConfigCompositionException

from tests.helpers.commands import run_script
from tests.helpers.hydra_config import compose_config
from transformer_nmt.cli.override_errors import unknown_key_message


def composition_error(*overrides: str) -> ConfigCompositionException:
    with pytest.raises(ConfigCompositionException) as caught:
        compose_config(*overrides)
    return caught.value


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("model.n_head=4", "no key 'n_head' in model: did you mean model.n_heads=4?"),
        ("search.beam=2", "no key 'beam' in search: did you mean search.beam_size=2?"),
        ("trainer.max_step=9", "no key 'max_step' in trainer: did you mean trainer.max_steps=9?"),
        ("seeed=1", "no top-level key 'seeed': did you mean seed=1?"),
    ],
)
def test_a_misspelt_key_names_the_nearest_one(override, expected):
    assert unknown_key_message(composition_error(override)) == expected


def test_a_key_with_no_near_neighbour_lists_the_keys_and_how_to_add_one():
    message = unknown_key_message(composition_error("callbacks.progress_bar.refresh=2"))
    assert message == (
        "no key 'refresh' in callbacks.progress_bar (its keys: _target_); "
        "+callbacks.progress_bar.refresh=2 adds a new key"
    )


def test_other_composition_errors_keep_hydras_message():
    assert unknown_key_message(composition_error("model=no_such_model")) is None


@pytest.mark.slow  # starts train.py
def test_train_py_prints_one_error_line_for_a_misspelt_key(tmp_path):
    result = run_script("train.py", "model.n_head=4", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip() == "error: no key 'n_head' in model: did you mean model.n_heads=4?"
    assert not (tmp_path / "outputs").exists()
