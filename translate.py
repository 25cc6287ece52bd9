"""Translate stdin to stdout, one line per line, with a checkpoint (a prompt on a terminal).

python translate.py ckpt_path=path/to.ckpt < input.en > output.de
"""

import hydra
from omegaconf import DictConfig

from transformer_nmt.cli.config_schemas import register_config_schemas
from transformer_nmt.cli.errors import exit_on_user_error
from transformer_nmt.cli.override_errors import clear_override_errors
from transformer_nmt.cli.translate import translate_command

register_config_schemas()


@hydra.main(version_base="1.3", config_path="conf", config_name="translate")
def main(cfg: DictConfig) -> None:
    exit_on_user_error(translate_command, cfg)


if __name__ == "__main__":
    with clear_override_errors():
        main()
