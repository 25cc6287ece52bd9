"""Text in, text out: tokenise with the checkpoint's tokenizer, decode in batches, detokenise."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import replace

from transformer_nmt.checkpoint import LoadedCheckpoint
from transformer_nmt.data.encoding import encode_texts
from transformer_nmt.decoding import SearchOptions, translate_token_ids
from transformer_nmt.model import Transformer

log = logging.getLogger(__name__)


class TextTranslator(ABC):
    """Translates lines of text around an engine that translates token ids.

    Sources are encoded like the training sources (token ids + EOS); a line longer than the
    model's ``max_len`` is truncated, with a warning. An empty (or blank) line translates to an
    empty line without running the model. Lines are decoded longest first in batches of
    ``options.batch_size`` and returned in input order; ``options.beam_size=1`` is greedy.
    Subclasses say how ids are translated (:meth:`translate_ids`).
    """

    def __init__(self, tokenizer, eos_id: int, max_len: int, options: SearchOptions) -> None:
        self.tokenizer = tokenizer
        self.eos_id = eos_id
        self.max_len = max_len  # positions of the model, the source's EOS included
        self.options = options

    @abstractmethod
    def translate_ids(self, sources: Sequence[Sequence[int]]) -> list[list[int]]:
        """Best output ids (no BOS, EOS or pad) per source (ids + EOS), in the order given."""

    def encode(
        self, lines: Sequence[str], line_numbers: Sequence[int] | None = None
    ) -> list[list[int]]:
        """Source ids + EOS per line, truncated to the model's max_len with a warning that
        names the line (``line_numbers``, default 1, 2, …).
        """
        line_numbers = line_numbers or range(1, len(lines) + 1)
        body_limit = self.max_len - 1
        encoded = []
        ids_per_line = encode_texts(self.tokenizer, list(lines))
        for line_number, ids in zip(line_numbers, ids_per_line, strict=True):
            if len(ids) > body_limit:
                log.warning(
                    "line %d has %d tokens; translating only its first %d (the model's "
                    "max_len=%d includes the EOS)",
                    line_number,
                    len(ids),
                    body_limit,
                    self.max_len,
                )
                ids = ids[:body_limit]
            encoded.append([*ids, self.eos_id])
        return encoded

    def decode(self, ids: Sequence[int]) -> str:
        """Detokenised text of output ids, on one line."""
        text = self.tokenizer.decode(list(ids), skip_special_tokens=True)
        return " ".join(text.splitlines()).strip()

    def translate(self, lines: Sequence[str], first_line_number: int = 1) -> list[str]:
        """One translation per line, in order (``first_line_number`` only labels warnings)."""
        texts = [line.strip() for line in lines]
        nonempty = [i for i, text in enumerate(texts) if text]
        line_numbers = [first_line_number + i for i in nonempty]
        outputs = self.translate_ids(self.encode([texts[i] for i in nonempty], line_numbers))
        translations = [""] * len(texts)
        for i, ids in zip(nonempty, outputs, strict=True):
            translations[i] = self.decode(ids)
        return translations


class Translator(TextTranslator):
    """Translates lines of text with a model of this project and the tokenizer it was trained
    with, by :func:`~transformer_nmt.decoding.translate_token_ids` (see :class:`TextTranslator`).
    """

    def __init__(
        self,
        model: Transformer,
        tokenizer,
        bos_id: int,
        eos_id: int,
        options: SearchOptions | None = None,
        **overrides,
    ) -> None:
        options = replace(options or SearchOptions(), **overrides)
        super().__init__(tokenizer, eos_id, model.config.max_len, options)
        self.model = model
        self.bos_id = bos_id

    @classmethod
    def from_checkpoint(
        cls, checkpoint: LoadedCheckpoint, options: SearchOptions | None = None, **overrides
    ) -> Translator:
        """A translator for a :func:`~transformer_nmt.checkpoint.load_checkpoint` result."""
        return cls(
            checkpoint.model,
            checkpoint.tokenizer,
            checkpoint.bos_id,
            checkpoint.eos_id,
            options,
            **overrides,
        )

    def translate_ids(self, sources: Sequence[Sequence[int]]) -> list[list[int]]:
        return translate_token_ids(self.model, sources, self.bos_id, self.eos_id, self.options)
