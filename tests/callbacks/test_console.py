"""What a run prints: the progress bar only on a terminal, Lightning's lines once."""

import io
import logging
import sys

import pytest

from transformer_nmt.callbacks import ProgressBar
from transformer_nmt.cli.library_notices import silence_library_notices


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("stdout", "drawn"), [(_Terminal(), True), (io.StringIO(), False)])
def test_the_progress_bar_draws_only_on_a_terminal(monkeypatch, stdout, drawn):
    monkeypatch.setattr(sys, "stdout", stdout)
    bar = ProgressBar()
    assert bar.is_enabled is drawn and bar.is_disabled is not drawn
    assert ProgressBar(refresh_rate=0).is_enabled is False  # Lightning's own switch still works


def test_lightning_logs_through_the_root_loggers_handlers_alone(monkeypatch):
    import lightning  # noqa: F401 — gives the "lightning" logger its console handler

    root, lightning_logger = logging.getLogger(), logging.getLogger("lightning")
    monkeypatch.setattr(root, "handlers", [logging.StreamHandler(io.StringIO())])
    monkeypatch.setattr(lightning_logger, "handlers", [logging.StreamHandler(io.StringIO())])
    monkeypatch.setattr(lightning_logger, "propagate", True)
    for name in ("lightning.pytorch", "lightning.fabric"):
        monkeypatch.setattr(logging.getLogger(name), "handlers", [])
        monkeypatch.setattr(logging.getLogger(name), "propagate", False)
    silence_library_notices()
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        assert logging.getLogger(name).handlers == [] and logging.getLogger(name).propagate
