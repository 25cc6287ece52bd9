"""What the page accepts in its input box: one line of Unicode text of at most ``max_words``
words, without control characters. Anything else gets a message naming the problem and the fix.
"""

from __future__ import annotations

import unicodedata

# a browser sends U+FFFD for bytes it could not decode, and lone surrogates for broken UTF-16
REPLACEMENT_CHARACTER = "\ufffd"
ALLOWED_CONTROLS = "\t\n\r"  # typed or pasted line breaks and tabs: read as spaces


class RejectedText(ValueError):
    """The input box holds text the page does not translate; the message says why and what to do."""


def check_source_text(text: str | None, max_words: int) -> str:
    """``text`` on one line (line breaks and tabs read as spaces, outer spaces stripped), or a
    :class:`RejectedText`."""
    if text is None or not text.strip():
        raise RejectedText("the input box is empty: type a sentence to translate")
    for position, character in enumerate(text, start=1):
        if character == REPLACEMENT_CHARACTER or 0xD800 <= ord(character) <= 0xDFFF:
            raise RejectedText(
                f"character {position} is not valid text (U+{ord(character):04X}: the text was "
                f"not UTF-8, or was cut inside a character); paste it again as UTF-8"
            )
        if unicodedata.category(character) == "Cc" and character not in ALLOWED_CONTROLS:
            raise RejectedText(
                f"character {position} is the control character U+{ord(character):04X}; "
                f"remove it and translate again"
            )
    line = " ".join(text.replace("\t", " ").splitlines()).strip()
    words = len(line.split())
    if words > max_words:
        raise RejectedText(
            f"the text has {words} words; this page translates up to {max_words} "
            f"(max_words={max_words}): translate a sentence at a time, or a whole file with "
            f"python translate.py"
        )
    return line
