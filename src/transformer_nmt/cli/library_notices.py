"""Library messages a run can do nothing about, silenced narrowly when a command starts.

Each filter matches one message of one library, and exists because the message cannot be avoided
from this project's code or configs:

- torch 2.10+ deprecates ``LeafSpec`` with a ``FutureWarning`` on construction, and Lightning 2.6
  builds one for every data loader (``CombinedLoader`` via ``lightning.pytorch.utilities._pytree``):
  Lightning must change, not the run. Only that message from that module is ignored.
- Lightning's top-level package gives its logger a console handler of its own on import; under a
  command that configures the root logger (Hydra's console and log file), every Lightning line
  would be printed twice. Where the root logger has handlers, Lightning's own are removed and its
  records reach the root's alone.
- transformers 5 draws a progress bar for every ``save_pretrained`` ("Writing model shards") and
  ``from_pretrained`` ("Loading weights"); ``export.py`` does each once, in a second, and says
  what it wrote in one line: :func:`hide_hugging_face_progress_bars` turns them off.
- Lightning 2.6 logs an advertisement for its LitLogger service ("💡 Tip: For seamless cloud
  logging ...") through its rank-zero logger whenever a ``Trainer`` is built without one; only
  records starting with that tip are dropped.
"""

from __future__ import annotations

import logging
import warnings

_LEAFSPEC_MESSAGE = r"`isinstance\(treespec, LeafSpec\)` is deprecated"
_LEAFSPEC_MODULE = r"lightning\.pytorch\.utilities\._pytree"
_RANK_ZERO_LOGGER = "lightning.pytorch.utilities.rank_zero"
_LIGHTNING_LOGGERS = ("lightning", "lightning.pytorch", "lightning.fabric")
_LITLOGGER_TIP = "💡 Tip: For seamless cloud logging"


class _DropLitLoggerTip(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_LITLOGGER_TIP)


def silence_library_notices() -> None:
    """Install the filters above (idempotent)."""
    warnings.filterwarnings(
        "ignore", message=_LEAFSPEC_MESSAGE, category=FutureWarning, module=_LEAFSPEC_MODULE
    )
    logger = logging.getLogger(_RANK_ZERO_LOGGER)
    if not any(isinstance(f, _DropLitLoggerTip) for f in logger.filters):
        logger.addFilter(_DropLitLoggerTip())
    if logging.getLogger().handlers:
        for name in _LIGHTNING_LOGGERS:
            lightning_logger = logging.getLogger(name)
            for handler in list(lightning_logger.handlers):
                if type(handler) is logging.StreamHandler:  # Lightning's; not a file handler
                    lightning_logger.removeHandler(handler)
            lightning_logger.propagate = True


def hide_hugging_face_progress_bars() -> None:
    """Turn off the progress bars of transformers and the Hugging Face Hub in this process."""
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging as transformers_logging

    disable_progress_bars()
    transformers_logging.disable_progress_bar()
