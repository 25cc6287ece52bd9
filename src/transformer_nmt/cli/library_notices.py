"""Library messages a run can do nothing about, silenced narrowly when a command starts.

Each filter matches one message of one library, and exists because the message cannot be avoided
from this project's code or configs:

- torch 2.10+ deprecates ``LeafSpec`` with a ``FutureWarning`` on construction, and Lightning 2.6
  builds one for every data loader (``CombinedLoader`` via ``lightning.pytorch.utilities._pytree``):
  Lightning must change, not the run. Only that message from that module is ignored.
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
