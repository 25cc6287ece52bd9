"""Average the weights of several checkpoints into one (the paper averaged the last 5 or 20).

python average_checkpoints.py inputs='[a.ckpt,b.ckpt]' output=avg.ckpt
python average_checkpoints.py dir=path/to/checkpoints last_n=5 output=avg.ckpt
"""

import hydra
from omegaconf import DictConfig

from transformer_nmt.cli.average import average_command
from transformer_nmt.cli.errors import exit_on_user_error
from transformer_nmt.cli.override_errors import clear_override_errors


@hydra.main(version_base="1.3", config_path="conf", config_name="average")
def main(cfg: DictConfig) -> None:
    exit_on_user_error(average_command, cfg)


if __name__ == "__main__":
    with clear_override_errors():
        main()
