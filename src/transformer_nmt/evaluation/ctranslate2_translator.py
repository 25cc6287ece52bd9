"""Translating with a CTranslate2 export (``engine=ct2``): the :class:`Translator`'s text
handling and search options, CTranslate2's decoder.

CTranslate2's search differs from ours in two ways, and this class closes the gaps it can:

* **Length limit.** Ours stops each sentence after ⌊a·|src| + b⌋ tokens (|src| with its EOS;
  at most ``max_len - 1``); CTranslate2 has one ``max_decoding_length`` per call. A batch is
  decoded in one call to its longest limit. Greedy search cuts each output at its own limit
  (exact: a greedy output is a prefix of the longer one). Beam search keeps a sentence's result
  when every hypothesis returned for it ended before its own limit: the search stopped before
  that limit could act, so a call with it would have returned the same; the few sentences whose
  search ran up to their limit are decoded again, grouped by limit (exact).
* **Length penalty.** Ours ranks finished hypotheses by log p / ((5 + |Y|) / 6)^α (GNMT);
  CTranslate2 by log p / |Y|^lp, and with lp = 0 it also stops at the first finished
  hypothesis instead of at ``beam_size`` of them. It runs here with lp = 1e-6, which keeps our
  stopping rule and ranks by log p, returns all ``beam_size`` finished hypotheses, and they are
  re-ranked by GNMT with our α.

Two differences remain (docs/design.md measures them): CTranslate2 suppresses pad and BOS before
its softmax (renormalising the other tokens' probabilities, where ours sets theirs to -inf after
it), which shifts beam scores slightly and can flip a near-tie; and when more than ``beam_size``
hypotheses finish at one step it keeps the most probable, which GNMT might have ranked otherwise.
Greedy float32 outputs are ours token for token.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch

from transformer_nmt.checkpoint import CheckpointError
from transformer_nmt.decoding import SearchOptions, gnmt_length_penalty
from transformer_nmt.decoding.steps import banned_token_ids
from transformer_nmt.export.ctranslate2 import TOKENIZER_DIR, vocabulary_tokens
from transformer_nmt.export.errors import import_ctranslate2
from transformer_nmt.export.metadata import ExportMetadata

from .translator import TextTranslator

# CTranslate2's length penalty for beam search: not 0, which would switch it to stopping at the
# first finished hypothesis, yet so small that |Y|^lp ≈ 1, so its scores are log-probabilities.
LOG_PROB_RANKING = 1e-6


class CTranslate2Translator(TextTranslator):
    """Translates lines of text with a directory written by
    :func:`~transformer_nmt.export.export_ctranslate2` (see :class:`TextTranslator`).

    ``device`` is ``cpu``, ``cuda`` or ``cuda:N``; CTranslate2 uses as many CPU threads as torch
    (``OMP_NUM_THREADS``).
    """

    def __init__(
        self,
        model_dir: Path | str,
        options: SearchOptions | None = None,
        *,
        device: str = "cpu",
        **overrides,
    ) -> None:
        from transformer_nmt.data import DataError, load_tokenizer

        ctranslate2 = import_ctranslate2()
        self.model_dir = Path(model_dir)
        metadata = ExportMetadata.read(self.model_dir) if self.model_dir.is_dir() else None
        if metadata is None or metadata.format != "ctranslate2":
            raise CheckpointError(
                f"{self.model_dir} is not a CTranslate2 export of this project (no "
                f"transformer_nmt.json with format 'ctranslate2'); write one with python "
                f"export.py ckpt_path=<checkpoint> format=ct2 output={self.model_dir}"
            )
        try:
            tokenizer = load_tokenizer(str(self.model_dir / TOKENIZER_DIR))
        except DataError as error:
            raise CheckpointError(f"{self.model_dir} holds no usable tokenizer: {error}") from error
        config = metadata.config
        super().__init__(
            tokenizer,
            metadata.eos_id,
            config.max_len,
            replace(options or SearchOptions(), **overrides),
        )
        self.metadata = metadata
        kind, _, index = device.partition(":")
        self.engine = ctranslate2.Translator(
            str(self.model_dir),
            device=kind,
            device_index=int(index or 0),
            inter_threads=1,
            intra_threads=torch.get_num_threads(),
        )
        self.tokens = vocabulary_tokens(tokenizer, config.tgt_vocab_size)
        self.token_ids = {token: i for i, token in enumerate(self.tokens)}
        banned = banned_token_ids(metadata.pad_id, metadata.bos_id, metadata.eos_id)
        self.suppressed = [[self.tokens[i]] for i in sorted(banned)] or None
        self.decoded_again = 0  # beam search: sentences decoded a second time, to their limit

    @property
    def src_lang(self) -> str:
        return self.metadata.src_lang

    @property
    def tgt_lang(self) -> str:
        return self.metadata.tgt_lang

    def limit(self, source_length: int) -> int:
        """Most output tokens for a source of ``source_length`` ids (EOS included), as
        :func:`~transformer_nmt.decoding.max_output_lengths`."""
        words = max(source_length - 1, 0)  # the source's EOS is not a word
        limit = math.floor(words * self.options.max_len_a + self.options.max_len_b)
        return max(0, min(limit, self.max_len - 1)) if source_length else 0

    def translate_ids(self, sources: Sequence[Sequence[int]]) -> list[list[int]]:
        order = sorted(range(len(sources)), key=lambda i: len(sources[i]), reverse=True)
        outputs: list[list[int]] = [[] for _ in sources]
        for start in range(0, len(order), self.options.batch_size):
            chunk = [i for i in order[start : start + self.options.batch_size] if sources[i]]
            limits = [self.limit(len(sources[i])) for i in chunk]
            # CTranslate2 appends the EOS itself
            pieces = [[self.tokens[t] for t in sources[i][:-1]] for i in chunk]
            for i, ids in zip(chunk, self._decode_batch(pieces, limits), strict=True):
                outputs[i] = ids
        return outputs

    def _decode_batch(self, pieces: list[list[str]], limits: list[int]) -> list[list[int]]:
        """The best ids of each sentence, each within its own limit: one call to the longest."""
        longest = max(limits, default=0)
        hypotheses = self._search(pieces, longest)
        if self.options.beam_size == 1:
            return [h[0][0][:limit] for h, limit in zip(hypotheses, limits, strict=True)]
        # a row whose search reached its own limit: that limit would have cut it, decode again
        again = [
            row
            for row, limit in enumerate(limits)
            if limit < longest and max(len(ids) for ids, _ in hypotheses[row]) >= limit
        ]
        self.decoded_again += len(again)
        for limit in sorted({limits[row] for row in again}):
            rows = [row for row in again if limits[row] == limit]
            for row, found in zip(
                rows, self._search([pieces[r] for r in rows], limit), strict=True
            ):
                hypotheses[row] = found
        return [self._best_by_gnmt(found) for found in hypotheses]

    def _search(
        self, pieces: list[list[str]], max_length: int
    ) -> list[list[tuple[list[int], float]]]:
        """One ``translate_batch`` call to at most ``max_length`` tokens: each sentence's
        hypotheses as (ids, CTranslate2's score); beam search's ids end with the EOS when
        the hypothesis finished."""
        if max_length == 0 or not pieces:
            return [[([], 0.0)] for _ in pieces]
        beam = self.options.beam_size > 1
        results = self.engine.translate_batch(
            pieces,
            beam_size=self.options.beam_size,
            length_penalty=LOG_PROB_RANKING if beam else 0.0,
            num_hypotheses=self.options.beam_size if beam else 1,
            return_scores=beam,
            return_end_token=beam,
            max_decoding_length=max_length,
            min_decoding_length=0,
            max_input_length=0,
            suppress_sequences=self.suppressed,
        )
        return [
            [
                ([self.token_ids[t] for t in tokens], score)
                for tokens, score in zip(
                    result.hypotheses, result.scores if beam else [0.0], strict=True
                )
            ]
            for result in results
        ]

    def _best_by_gnmt(self, hypotheses: list[tuple[list[int], float]]) -> list[int]:
        """The finished hypothesis with the best log p / ((5 + |Y|) / 6)^α, |Y| with the EOS.
        CTranslate2 scored each log p / |Y|^lp (|Y| with the EOS: it is returned here)."""
        best, best_score = [], -math.inf
        for ids, score in hypotheses:
            log_prob = score * len(ids) ** LOG_PROB_RANKING
            gnmt = log_prob / gnmt_length_penalty(len(ids), self.options.length_penalty)
            if gnmt > best_score:
                best_score = gnmt
                best = ids[:-1] if ids and ids[-1] == self.eos_id else ids
        return best
