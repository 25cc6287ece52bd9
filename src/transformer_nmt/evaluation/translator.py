"""Text in, text out: tokenise with the checkpoint's tokenizer, decode in batches, detokenise."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, replace

from transformer_nmt.checkpoint import (
    TOKENIZER_IDENTITY_KEY,
    CheckpointError,
    LoadedCheckpoint,
    tokenizer_mismatch,
)
from transformer_nmt.data import tokenizer_identity
from transformer_nmt.data.encoding import encode_texts
from transformer_nmt.decoding import (
    Ensemble,
    SearchOptions,
    nbest_token_ids,
    score_token_ids,
    translate_token_ids,
)
from transformer_nmt.model import Transformer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScoredTranslation:
    """One entry of an n-best list: the text and the beam's score, the summed log-probability
    (natural log, EOS included) divided by the GNMT length penalty ((5 + |Y|) / 6)^α."""

    text: str
    score: float


@dataclass(frozen=True)
class ReferenceScore:
    """The log-probability (natural log) of a reference given its source, in all and per target
    token (the EOS last): forced decoding, no length penalty."""

    log_prob: float
    token_log_probs: list[float]


class ReferenceTooLongError(ValueError):
    """A reference has more tokens than the model's decoder has positions."""


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
    """Translates lines of text with a model of this project (or an ensemble of them: a
    sequence of models, the mean of their log-probabilities at each step) and the tokenizer it
    was trained with, by :func:`~transformer_nmt.decoding.translate_token_ids` (see
    :class:`TextTranslator`). Also lists the n best translations (:meth:`translate_nbest`) and
    scores given references (:meth:`score_references`).
    """

    def __init__(
        self,
        model: Transformer | Sequence[Transformer],
        tokenizer,
        bos_id: int,
        eos_id: int,
        options: SearchOptions | None = None,
        **overrides,
    ) -> None:
        options = replace(options or SearchOptions(), **overrides)
        super().__init__(tokenizer, eos_id, Ensemble.of(model).max_len, options)
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

    @classmethod
    def from_checkpoints(
        cls,
        checkpoints: Sequence[LoadedCheckpoint],
        options: SearchOptions | None = None,
        **overrides,
    ) -> Translator:
        """A translator for an ensemble of loaded checkpoints (one: that checkpoint alone). They
        must share a tokenizer and a translation direction (:class:`CheckpointError`)."""
        if not checkpoints:
            raise CheckpointError("an ensemble needs at least one checkpoint")
        first = checkpoints[0]
        for other in checkpoints[1:]:
            _require_ensemble_partners(first, other)
        models = [checkpoint.model for checkpoint in checkpoints]
        return cls(
            models if len(models) > 1 else first.model,
            first.tokenizer,
            first.bos_id,
            first.eos_id,
            options,
            **overrides,
        )

    def translate_ids(self, sources: Sequence[Sequence[int]]) -> list[list[int]]:
        return translate_token_ids(self.model, sources, self.bos_id, self.eos_id, self.options)

    def translate_nbest(
        self, lines: Sequence[str], first_line_number: int = 1
    ) -> list[list[ScoredTranslation]]:
        """The ``options.nbest`` (default 1) best translations of each line, best first, with
        their scores; an empty (or blank) line gets one empty translation scored 0."""
        texts = [line.strip() for line in lines]
        nonempty = [i for i, text in enumerate(texts) if text]
        line_numbers = [first_line_number + i for i in nonempty]
        sources = self.encode([texts[i] for i in nonempty], line_numbers)
        found = nbest_token_ids(self.model, sources, self.bos_id, self.eos_id, self.options)
        results = [[ScoredTranslation("", 0.0)] for _ in texts]
        for i, hypotheses in zip(nonempty, found, strict=True):
            results[i] = [ScoredTranslation(self.decode(h.tokens), h.score) for h in hypotheses]
        return results

    def score_references(
        self, lines: Sequence[str], references: Sequence[str], first_line_number: int = 1
    ) -> list[ReferenceScore]:
        """The log-probability of each reference given the line of the same index (forced
        decoding, the ensemble's mean for several models), in batches of
        ``options.batch_size``. Sources are encoded as for :meth:`translate` (truncated with a
        warning); a reference longer than the decoder's positions raises
        :class:`ReferenceTooLongError` naming the first, before anything is scored.
        """
        if len(lines) != len(references):
            raise ValueError(f"{len(lines)} lines but {len(references)} references")
        line_numbers = range(first_line_number, first_line_number + len(lines))
        sources = self.encode([line.strip() for line in lines], line_numbers)
        targets = encode_texts(self.tokenizer, [ref.strip() for ref in references], target=True)
        body_limit = self.max_len - 1  # the EOS takes the last position
        for line_number, ids in zip(line_numbers, targets, strict=True):
            if len(ids) > body_limit:
                raise ReferenceTooLongError(
                    f"reference line {line_number} has {len(ids)} tokens; the model scores at "
                    f"most {body_limit} (its max_len={self.max_len} includes the EOS)"
                )
        scores = score_token_ids(
            self.model, sources, targets, self.bos_id, self.eos_id, self.options.batch_size
        )
        return [ReferenceScore(sum(tokens), tokens) for tokens in scores]


def _require_ensemble_partners(first: LoadedCheckpoint, other: LoadedCheckpoint) -> None:
    """Refuse to ensemble checkpoints with different tokenizers or directions."""
    why = None
    if (other.src_lang, other.tgt_lang) != (first.src_lang, first.tgt_lang):
        why = (
            f"they translate different directions ({first.src_lang}→{first.tgt_lang} and "
            f"{other.src_lang}→{other.tgt_lang})"
        )
    else:
        # ``other`` as a checkpoint that records its own tokenizer's identity
        trained_with = {
            "hyper_parameters": {
                **other.hyper_parameters,
                TOKENIZER_IDENTITY_KEY: tokenizer_identity(other.tokenizer),
            }
        }
        problem = tokenizer_mismatch(trained_with, first.tokenizer)
        if problem:
            why = (
                f"they were trained with different tokenizers ({first.tokenizer_dir!r} and "
                f"{other.tokenizer_dir!r}); the first, against the second's model: {problem}"
            )
    if why:
        raise CheckpointError(
            f"cannot ensemble {other.path} with {first.path}: {why}; ensemble only checkpoints "
            f"of one tokenizer and direction, as an ensemble combines the models' "
            f"log-probabilities token id by token id"
        )
