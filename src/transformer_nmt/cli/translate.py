"""``python translate.py``: stdin to stdout, one line per line, with a checkpoint (or, with
``engine=ct2``, a CTranslate2 export)."""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterable
from typing import BinaryIO, TextIO

from omegaconf import DictConfig

from transformer_nmt.evaluation import TextTranslator

from .errors import InputError, UsageError
from .loading import load_translator, log_to_stderr
from .text_input import LineDecoder, check_input_errors, checked_lines

_EXIT_BROKEN_PIPE = 128 + 13  # as if killed by SIGPIPE, like any filter whose reader went away


def translate_command(cfg: DictConfig) -> None:
    """stdin → stdout, one line in, one line out; an interactive prompt on a terminal.

    Piped input is checked to be UTF-8 before anything is written (``input_errors``, see
    :mod:`~transformer_nmt.cli.text_input`). If the reader of stdout goes away (``| head``),
    the command stops quietly.
    """
    log_to_stderr()
    check_input_errors(cfg.input_errors)
    if cfg.chunk_lines < 1:
        raise UsageError(f"chunk_lines must be a positive integer, got {cfg.chunk_lines}")
    translator = load_translator(cfg).translator
    if hasattr(sys.stdout, "reconfigure"):  # UTF-8 and \n whatever the locale
        sys.stdout.reconfigure(encoding="utf-8", newline="\n")
    try:
        if sys.stdin.isatty():
            translate_interactively(
                translator, sys.stdin.buffer, sys.stdout, sys.stderr, cfg.input_errors
            )
        else:
            with checked_lines(sys.stdin.buffer, cfg.input_errors) as lines:
                translate_stream(translator, lines, sys.stdout, cfg.chunk_lines)
    except BrokenPipeError:
        # stdout's reader is gone: no traceback, and none when Python flushes stdout at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(_EXIT_BROKEN_PIPE)


def translate_stream(
    translator: TextTranslator, lines: Iterable[str], output: TextIO, chunk_lines: int = 1000
) -> int:
    """Translate ``lines`` in chunks of ``chunk_lines`` (each sorted by length internally),
    writing one line per input line to ``output``; returns the number of lines.
    """
    lines = iter(lines)
    done = 0
    while chunk := list(itertools.islice(lines, chunk_lines)):
        for translation in translator.translate(chunk, first_line_number=done + 1):
            output.write(translation + "\n")
        output.flush()
        done += len(chunk)
    return done


def translate_interactively(
    translator: TextTranslator,
    lines: BinaryIO,
    output: TextIO,
    prompt_to: TextIO,
    input_errors: str = "strict",
) -> None:
    """Prompt ``> `` on ``prompt_to``, translate each line typed, until end of input; a line
    that is not UTF-8 gets an ``error:`` on ``prompt_to`` (``input_errors=strict``) instead."""
    decoder = LineDecoder(input_errors)
    for number in itertools.count(1):
        prompt_to.write("> ")
        prompt_to.flush()
        try:
            raw = lines.readline()
        except KeyboardInterrupt:
            break
        if not raw:
            break
        try:
            line = decoder.decode(raw, number)
        except InputError as error:
            prompt_to.write(f"error: {error}\n")
            continue
        output.write(translator.translate([line])[0] + "\n")
        output.flush()
    prompt_to.write("\n")
