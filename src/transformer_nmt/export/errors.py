"""What an export (or an import) raises: a model the other format cannot hold, a missing package."""

from __future__ import annotations


class UnsupportedModelError(ValueError):
    """The model (or its tokenizer) has a shape the target format cannot hold.

    Raised before anything is written, once per export, on one line: the target, then every
    offending field with why it cannot be held and what to do instead.
    """

    def __init__(self, target: str, problems: list[str]) -> None:
        self.target = target
        self.problems = list(problems)
        super().__init__(f"cannot convert to {target}: " + "; ".join(self.problems))


def raise_if_problems(target: str, problems: list[str]) -> None:
    """Raise one :class:`UnsupportedModelError` listing ``problems``, if there are any."""
    if problems:
        raise UnsupportedModelError(target, problems)


class MissingDependencyError(ImportError):
    """An optional package the asked-for format or engine needs is not installed."""


def import_ctranslate2():
    """The ``ctranslate2`` module, or a :class:`MissingDependencyError` saying how to install it."""
    try:
        import ctranslate2
    except ImportError as error:
        raise MissingDependencyError(
            'CTranslate2 is not installed: pip install -e ".[export]" (or pip install '
            f"ctranslate2) ({error})"
        ) from error
    return ctranslate2


class ExportOutputError(ValueError):
    """The export's output may not be written or replaced; the message says why and what to do."""
