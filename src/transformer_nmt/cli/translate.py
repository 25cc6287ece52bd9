"""``python translate.py``: stdin to stdout, one line per line, with a checkpoint, an ensemble
of checkpoints or (``engine=ct2``) a CTranslate2 export; or, with ``search.nbest=K``, the K best
translations of each line with their scores; or, with ``score_references=true``, the
log-probability of given references.

Output formats (i is the 0-based input line index; scores are natural logs, 4 decimals):

* ``search.nbest=K``: K lines per input line, best first, ``i ||| translation ||| score``, score
  = the beam's summed log-probability (EOS included) / ((5 + |Y|) / 6)^α; an empty input line
  gets one line, ``i |||  ||| 0.0000``.
* ``score_references=true``: one line per input line, ``i ||| reference ||| log-probability |||
  per-token log-probabilities``: the reference's log-probability given the input line (forced
  decoding, no length penalty) and that of each of its target tokens, the EOS last.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import BinaryIO, TextIO

from hydra.utils import to_absolute_path
from omegaconf import DictConfig

from transformer_nmt.evaluation import TextTranslator
from transformer_nmt.evaluation.translator import (
    ReferenceScore,
    ReferenceTooLongError,
    ScoredTranslation,
)

from .errors import InputError, UsageError
from .loading import load_translator, log_to_stderr
from .text_input import LineDecoder, check_input_errors, checked_lines

_EXIT_BROKEN_PIPE = 128 + 13  # as if killed by SIGPIPE, like any filter whose reader went away


def translate_command(cfg: DictConfig) -> None:
    """stdin → stdout, one line in, one line out (``search.nbest``: K lines, with scores;
    ``score_references``: one score line per reference); an interactive prompt on a terminal.

    Piped input is checked to be UTF-8 before anything is written (``input_errors``, see
    :mod:`~transformer_nmt.cli.text_input`). If the reader of stdout goes away (``| head``),
    the command stops quietly.
    """
    log_to_stderr()
    check_input_errors(cfg.input_errors)
    if cfg.chunk_lines < 1:
        raise UsageError(f"chunk_lines must be a positive integer, got {cfg.chunk_lines}")
    references = _references(cfg)
    translator = load_translator(cfg).translator
    if hasattr(sys.stdout, "reconfigure"):  # UTF-8 and \n whatever the locale
        sys.stdout.reconfigure(encoding="utf-8", newline="\n")
    try:
        if references is not None:
            with checked_lines(sys.stdin.buffer, cfg.input_errors) as lines:
                score_stream(translator, lines, references, sys.stdout)
        elif sys.stdin.isatty():
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


def _references(cfg: DictConfig) -> list[str] | None:
    """The lines of ``cfg.references`` if ``cfg.score_references``, else None; the options are
    checked against each other (and the engine) before any model is loaded."""
    engine, nbest = cfg.get("engine", "torch"), cfg.search.get("nbest")
    if nbest is not None and engine != "torch":
        raise UsageError(
            f"search.nbest lists our beam search's hypotheses; engine={engine} returns the best "
            f"translation only: leave search.nbest unset, or translate with engine=torch"
        )
    if not cfg.score_references:
        if cfg.references:
            raise UsageError(
                f"references={cfg.references} is read only when scoring: add "
                f"score_references=true to score it, or leave references unset to translate"
            )
        return None
    if engine != "torch":
        raise UsageError(
            f"score_references=true scores with a checkpoint; engine={engine} cannot: give "
            f"ckpt_path=… (and engine=torch)"
        )
    if nbest is not None:
        raise UsageError(
            "score_references=true scores the given references and translates nothing, so "
            "search.nbest does not apply: leave it unset"
        )
    if not cfg.references:
        raise UsageError(
            "score_references=true needs the references: references=path/to/file, one "
            "reference per input line"
        )
    if sys.stdin.isatty():
        raise UsageError(
            "score_references=true reads its input lines from a file or a pipe, not a "
            "terminal: python translate.py … < input.txt"
        )
    return read_references(Path(to_absolute_path(cfg.references)))


def read_references(path: Path) -> list[str]:
    """The lines of a UTF-8 file (``\\n`` ends a line), refused with one error naming the
    file and the first line that is not UTF-8."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"references file {path} does not exist") from None
    except OSError as error:
        raise UsageError(f"cannot read references file {path}: {error.strerror}") from None
    raw_lines = data.split(b"\n")
    if raw_lines[-1] == b"":
        raw_lines.pop()
    lines = []
    for number, raw in enumerate(raw_lines, start=1):
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError as error:
            raise InputError(
                f"line {number} of references file {path} is not valid UTF-8 (byte "
                f"{error.start + 1} of the line is 0x{raw[error.start]:02x}); convert it to "
                f"UTF-8, e.g. iconv -f latin1 -t utf-8"
            ) from None
    if lines:
        lines[0] = lines[0].removeprefix("\ufeff")  # a byte-order mark
    return lines


def translate_stream(
    translator: TextTranslator, lines: Iterable[str], output: TextIO, chunk_lines: int = 1000
) -> int:
    """Translate ``lines`` in chunks of ``chunk_lines`` (each sorted by length internally),
    writing one line per input line to ``output`` (with ``search.nbest=K``, K n-best lines);
    returns the number of lines.
    """
    lines = iter(lines)
    done = 0
    while chunk := list(itertools.islice(lines, chunk_lines)):
        for line in _output_lines(translator, chunk, done):
            output.write(line + "\n")
        output.flush()
        done += len(chunk)
    return done


def _output_lines(translator: TextTranslator, chunk: Sequence[str], first_index: int) -> list[str]:
    """What ``chunk`` (input lines ``first_index``, … counted from 0) prints: its translations,
    or the n-best lines of each."""
    if translator.options.nbest is None:
        return translator.translate(chunk, first_line_number=first_index + 1)
    nbest = translator.translate_nbest(chunk, first_line_number=first_index + 1)
    return [
        nbest_line(first_index + i, entry) for i, entries in enumerate(nbest) for entry in entries
    ]


def nbest_line(index: int, entry: ScoredTranslation) -> str:
    """``index ||| translation ||| score``, fairseq's and Marian's n-best layout."""
    return f"{index} ||| {entry.text} ||| {entry.score:.4f}"


def score_stream(
    translator: TextTranslator,
    lines: Iterable[str],
    references: Sequence[str],
    output: TextIO,
) -> int:
    """Score each reference given the input line of the same index, writing one line per pair
    (:func:`reference_score_line`); returns the number of lines. Both are read whole and
    checked (as many lines; no reference too long for the model) before anything is written.
    """
    lines = list(lines)
    if len(lines) != len(references):
        raise InputError(
            f"the input has {len(lines)} lines but the references have {len(references)}; "
            f"give one reference per input line; nothing was scored"
        )
    try:
        scores = translator.score_references(lines, references)
    except ReferenceTooLongError as error:
        raise InputError(f"{error}; nothing was scored") from None
    for index, (reference, score) in enumerate(zip(references, scores, strict=True)):
        output.write(reference_score_line(index, reference.strip(), score) + "\n")
    output.flush()
    return len(lines)


def reference_score_line(index: int, reference: str, score: ReferenceScore) -> str:
    """``index ||| reference ||| log-probability ||| per-token log-probabilities``."""
    tokens = " ".join(f"{log_prob:.4f}" for log_prob in score.token_log_probs)
    return f"{index} ||| {reference} ||| {score.log_prob:.4f} ||| {tokens}"


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
        for output_line in _output_lines(translator, [line], number - 1):
            output.write(output_line + "\n")
        output.flush()
    prompt_to.write("\n")
