"""Translate a split with a checkpoint and score it with sacreBLEU and chrF.

python evaluate.py ckpt_path=path/to.ckpt data.data_dir=DIR split=test search.beam_size=4
"""

import hydra
from omegaconf import DictConfig

from transformer_nmt.cli.config_schemas import register_config_schemas
from transformer_nmt.cli.errors import exit_on_user_error
from transformer_nmt.cli.evaluate import evaluate_command
from transformer_nmt.cli.override_errors import clear_override_errors

register_config_schemas()


@hydra.main(version_base="1.3", config_path="conf", config_name="evaluate")
def main(cfg: DictConfig) -> None:
    exit_on_user_error(evaluate_command, cfg)


if __name__ == "__main__":
    with clear_override_errors():
        main()
