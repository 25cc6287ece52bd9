"""translate.py's input: checked to be UTF-8 before the first line is handed out."""

import io
import logging

import pytest

from transformer_nmt.cli.errors import InputError
from transformer_nmt.cli.text_input import checked_lines

VALID = ["A dog runs.", "Zwei Männer.", "", "Ça va ?"]


class Pipe(io.BytesIO):
    """Reads like stdin from a pipe: no seeking."""

    def seekable(self) -> bool:
        return False

    def seek(self, *args):
        raise io.UnsupportedOperation("seek")


def encoded(lines: list[str], bad_line: int | None = None) -> bytes:
    """``lines`` as UTF-8, with a Latin-1 byte (not UTF-8) in line ``bad_line`` (from 1)."""
    raw = [line.encode() for line in lines]
    if bad_line is not None:
        raw[bad_line - 1] = b"caf\xe9 " + raw[bad_line - 1]
    return b"".join(line + b"\n" for line in raw)


@pytest.mark.parametrize("stream_type", [io.BytesIO, Pipe])
def test_an_invalid_line_stops_before_any_line_is_handed_out(stream_type):
    handed_out = []
    stream = stream_type(encoded(VALID * 3, bad_line=10))
    with pytest.raises(InputError) as raised, checked_lines(stream) as lines:
        handed_out.extend(lines)
    assert handed_out == []
    assert str(raised.value).startswith(
        "input line 10 is not valid UTF-8: byte 4 of the line is 0xe9"
    )
    assert "input_errors=replace" in str(raised.value)


@pytest.mark.parametrize("stream_type", [io.BytesIO, Pipe])
def test_valid_input_reads_once_through_from_where_the_stream_stands(stream_type):
    stream = stream_type(b"skipped\n" + "\ufeff".encode() + encoded(VALID))
    stream.readline()  # a file already read from: the check rewinds to here, not to the start
    with checked_lines(stream) as lines:
        assert [line.rstrip("\n") for line in lines] == VALID  # and the byte-order mark is gone


def test_replace_translates_every_line_and_names_the_first_invalid_ones(caplog):
    lines_in = VALID * 10
    bad = list(range(1, 41, 3))  # 14 lines: the first 10 are named, then a count
    data = b"".join(
        (b"\xff" if number in bad else b"") + line.encode() + b"\n"
        for number, line in enumerate(lines_in, start=1)
    )
    with caplog.at_level(logging.WARNING), checked_lines(Pipe(data), "replace") as lines:
        decoded = [line.rstrip("\n") for line in lines]
    assert len(decoded) == len(lines_in)
    replaced = [n for n, line in enumerate(decoded, start=1) if line.startswith("\ufffd")]
    assert replaced == bad
    messages = [r.message for r in caplog.records]
    assert [m.split(" is not")[0] for m in messages[:10]] == [f"input line {n}" for n in bad[:10]]
    assert len(messages) == 11 and messages[10].startswith("14 input lines in all")


def test_an_unknown_input_errors_option_is_refused():
    refused = r"input_errors must be one of \['strict', 'replace'\]"
    with pytest.raises(ValueError, match=refused), checked_lines(io.BytesIO(b""), "ignore"):
        pass


def test_a_nul_stops_strict_input_naming_the_line_and_is_replaced_on_request(caplog):
    utf16_line = "A dog.".encode("utf-16-le")  # valid UTF-8, but every other byte a NUL
    data = encoded(VALID) + utf16_line + b"\n"
    with pytest.raises(InputError) as raised, checked_lines(Pipe(data)) as lines:
        list(lines)
    assert str(raised.value).startswith(
        "input line 5 holds a NUL character (character 2 of the line is a NUL): UTF-16 text"
    )
    with caplog.at_level(logging.WARNING), checked_lines(Pipe(data), "replace") as lines:
        last = list(lines)[-1]
    assert last == "A\ufffd \ufffdd\ufffdo\ufffdg\ufffd.\ufffd\n"
    assert "input line 5 holds a NUL" in caplog.text
