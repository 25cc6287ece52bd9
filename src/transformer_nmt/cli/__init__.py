"""What each command does: ``train.py``, ``evaluate.py``, ``translate.py``, ``export.py``,
``average_checkpoints.py`` and ``report.py`` at the repository root call these."""
