"""A web page to try a model: translation, n-best list and every head's attention.

python demo.py ckpt_path=path/to.ckpt            # then open http://127.0.0.1:7860
python demo.py hf_dir=hf-model port=8080         # a Hugging Face export
python demo.py model_dir=ct2-model               # a CTranslate2 export (no attention)
"""

import hydra
from omegaconf import DictConfig

from transformer_nmt.cli.config_schemas import register_config_schemas
from transformer_nmt.cli.demo import demo_command
from transformer_nmt.cli.errors import exit_on_user_error

register_config_schemas()


@hydra.main(version_base="1.3", config_path="conf", config_name="demo")
def main(cfg: DictConfig) -> None:
    exit_on_user_error(demo_command, cfg)


if __name__ == "__main__":
    main()
