"""``python translate.py``: stdin to stdout, one line per line, with a checkpoint (or, with
``engine=ct2``, a CTranslate2 export)."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterable
from typing import TextIO

from omegaconf import DictConfig

from transformer_nmt.evaluation import TextTranslator

from .loading import load_translator, log_to_stderr


def translate_command(cfg: DictConfig) -> None:
    """stdin → stdout, one line in, one line out; an interactive prompt on a terminal."""
    log_to_stderr()
    translator = load_translator(cfg).translator
    for stream in (sys.stdin, sys.stdout):
        if hasattr(stream, "reconfigure"):  # UTF-8 whatever the locale; split on \n only
            stream.reconfigure(encoding="utf-8", newline="\n")
    if sys.stdin.isatty():
        translate_interactively(translator, sys.stdin, sys.stdout, sys.stderr)
    else:
        translate_stream(translator, sys.stdin, sys.stdout, cfg.chunk_lines)


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
    translator: TextTranslator, lines: TextIO, output: TextIO, prompt_to: TextIO
) -> None:
    """Prompt ``> `` on ``prompt_to``, translate each line typed, until end of input."""
    while True:
        prompt_to.write("> ")
        prompt_to.flush()
        try:
            line = lines.readline()
        except KeyboardInterrupt:
            break
        if not line:
            break
        output.write(translator.translate([line])[0] + "\n")
        output.flush()
    prompt_to.write("\n")
