"""Train the Transformer: ``python train.py [group=option ...] [key=value ...]``.

The config lives in ``conf/`` (``conf/train.yaml`` lists the groups); the logic in
``transformer_nmt.cli.train``. README.md shows the main jobs and sweeps; docs/design.md explains
DDP, checkpoints and resuming.
"""

import hydra
from omegaconf import DictConfig

from transformer_nmt.cli.config_schemas import register_config_schemas
from transformer_nmt.cli.override_errors import clear_override_errors

register_config_schemas()


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    # imported here, so that --help and --cfg stay fast
    from transformer_nmt.cli.errors import exit_on_user_error
    from transformer_nmt.cli.train import train

    return exit_on_user_error(train, cfg)


if __name__ == "__main__":
    with clear_override_errors():
        main()
