"""Export a checkpoint for use outside this project: a Hugging Face folder or CTranslate2.

python export.py ckpt_path=path/to.ckpt format=hf output=DIR
python export.py ckpt_path=path/to.ckpt format=ct2 quantization=int8 output=DIR
"""

import hydra
from omegaconf import DictConfig

from transformer_nmt.cli.config_schemas import register_config_schemas
from transformer_nmt.cli.errors import exit_on_user_error
from transformer_nmt.cli.export import export_command
from transformer_nmt.cli.library_notices import hide_hugging_face_progress_bars
from transformer_nmt.cli.override_errors import clear_override_errors

register_config_schemas()


@hydra.main(version_base="1.3", config_path="conf", config_name="export")
def main(cfg: DictConfig) -> None:
    hide_hugging_face_progress_bars()
    exit_on_user_error(export_command, cfg)


if __name__ == "__main__":
    with clear_override_errors():
        main()
