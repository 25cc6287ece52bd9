"""A trained model leaves the project, and a pretrained one comes in.

``export_huggingface`` writes a Marian (post-norm) or Pegasus (pre-norm) folder that
``transformers`` loads without this project; ``export_ctranslate2`` a CTranslate2 directory
(float32 or int8) for fast inference (``pip install -e ".[export]"``); ``import_marian`` builds
our model and tokenizer from a Marian (opus-mt) checkpoint, for fine-tuning (``train.py
init_from=…``). Shapes a format cannot hold end in one :class:`UnsupportedModelError`.
"""

from .ctranslate2 import QUANTIZATIONS, export_ctranslate2
from .errors import UnsupportedModelError
from .huggingface import export_huggingface
from .marian_import import import_marian
from .metadata import ExportMetadata

__all__ = [
    "QUANTIZATIONS",
    "ExportMetadata",
    "UnsupportedModelError",
    "export_ctranslate2",
    "export_huggingface",
    "import_marian",
]
