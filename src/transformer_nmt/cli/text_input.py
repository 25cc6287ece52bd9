"""``translate.py``'s input: UTF-8 lines, checked before anything is translated or written.

``input_errors=strict`` (the default): the whole input is read and checked before its first line
is translated, so a byte that is not UTF-8 stops the command with an error naming the line and
nothing is written; stdout, maybe a pipe into another program, never gets a truncated
translation. A regular file on stdin is checked in place and then read again; a pipe is copied
into an unnamed temporary file (in ``$TMPDIR``, as large as the input) while it is checked.
Checking costs 1-2 µs per line, nothing beside translating, but the first output line waits for
the end of the input.

``input_errors=replace``: invalid bytes become U+FFFD and the line is translated, with a warning
naming it; nothing is read ahead, so lines stream through chunk by chunk. A NUL character, valid
UTF-8 but no text (UTF-16 input, a binary file), counts as an invalid byte.

Lines end at ``\\n`` only; a leading byte-order mark is dropped.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import BinaryIO

from .errors import InputError, UsageError

log = logging.getLogger(__name__)

INPUT_ERRORS = ("strict", "replace")
_BYTE_ORDER_MARK = "\ufeff"
_LISTED_REPLACEMENTS = 10  # lines named in warnings; beyond that only the count


def check_input_errors(input_errors: str) -> None:
    """Refuse an unknown ``input_errors`` option."""
    if input_errors not in INPUT_ERRORS:
        raise UsageError(f"input_errors must be one of {list(INPUT_ERRORS)}, got {input_errors!r}")


@contextmanager
def checked_lines(stream: BinaryIO, input_errors: str = "strict") -> Iterator[Iterator[str]]:
    """The decoded lines of ``stream``; with ``strict``, all of them checked before the first
    is handed out (an :class:`InputError` names the first invalid line)."""
    check_input_errors(input_errors)
    if input_errors == "replace":
        yield decoded_lines(stream, input_errors)
    elif _seekable(stream):
        start = stream.tell()
        _read_all(decoded_lines(stream, input_errors))
        stream.seek(start)
        yield decoded_lines(stream, input_errors)
    else:
        with tempfile.TemporaryFile(prefix="translate-input-") as copy:
            _read_all(decoded_lines(_copied(stream, copy), input_errors))
            copy.seek(0)
            yield decoded_lines(copy, input_errors)


def decoded_lines(raw_lines: Iterable[bytes], input_errors: str = "strict") -> Iterator[str]:
    """Each line of ``raw_lines`` (bytes, ending in ``\\n``) as text, numbered from 1."""
    decoder = LineDecoder(input_errors)
    for number, raw in enumerate(raw_lines, start=1):
        yield decoder.decode(raw, number)
    decoder.summarise()


class LineDecoder:
    """Decodes lines as UTF-8: ``strict`` raises :class:`InputError` naming the line,
    ``replace`` puts U+FFFD in place of invalid bytes and warns (the first few lines by number,
    then a count)."""

    def __init__(self, input_errors: str = "strict") -> None:
        check_input_errors(input_errors)
        self.input_errors = input_errors
        self.replaced = 0

    def decode(self, raw: bytes, number: int) -> str:
        try:
            text = raw.decode("utf-8")
            if "\0" in text:
                return self._nul(text, number)
        except UnicodeDecodeError as error:
            where = (
                f"byte {error.start + 1} of the line is 0x{raw[error.start]:02x} ({error.reason})"
            )
            if self.input_errors == "strict":
                raise InputError(
                    f"input line {number} is not valid UTF-8: {where}; nothing was translated. "
                    f"Convert the input to UTF-8 (e.g. iconv -f latin1 -t utf-8), or pass "
                    f"input_errors=replace to translate it with U+FFFD for invalid bytes"
                ) from None
            text = raw.decode("utf-8", errors="replace").replace("\0", "\ufffd")
            self.replaced += 1
            if self.replaced <= _LISTED_REPLACEMENTS:
                log.warning(
                    "input line %d is not valid UTF-8 (%s): translating it with U+FFFD for "
                    "the invalid bytes",
                    number,
                    where,
                )
        return text.removeprefix(_BYTE_ORDER_MARK) if number == 1 else text

    def _nul(self, text: str, number: int) -> str:
        """A NUL character, valid UTF-8 but no text: UTF-16 input, or a binary file."""
        where = f"character {text.index(chr(0)) + 1} of the line is a NUL"
        if self.input_errors == "strict":
            raise InputError(
                f"input line {number} holds a NUL character ({where}): UTF-16 text or a binary "
                f"file?; nothing was translated. Convert the input to UTF-8 (e.g. iconv -f "
                f"utf-16 -t utf-8), or pass input_errors=replace to translate it with U+FFFD for "
                f"each NUL"
            )
        self.replaced += 1
        if self.replaced <= _LISTED_REPLACEMENTS:
            log.warning("input line %d holds a NUL (%s): translating it with U+FFFD", number, where)
        text = text.replace("\0", "\ufffd")
        return text.removeprefix(_BYTE_ORDER_MARK) if number == 1 else text

    def summarise(self) -> None:
        """Warn how many lines had invalid bytes, if more than the warnings named."""
        if self.replaced > _LISTED_REPLACEMENTS:
            log.warning(
                "%d input lines in all were not valid UTF-8 (U+FFFD in place of invalid "
                "bytes); only the first %d are named above",
                self.replaced,
                _LISTED_REPLACEMENTS,
            )


def _seekable(stream: BinaryIO) -> bool:
    try:
        return stream.seekable()
    except (OSError, ValueError):
        return False


def _copied(stream: BinaryIO, copy: BinaryIO) -> Iterator[bytes]:
    for raw in stream:
        copy.write(raw)
        yield raw


def _read_all(lines: Iterator[str]) -> None:
    for _ in lines:
        pass
