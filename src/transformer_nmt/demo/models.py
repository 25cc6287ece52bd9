"""What the page translates with: a checkpoint (or a Hugging Face export, imported into this
project's Transformer) with our search and every head's attention, or a CTranslate2 export
with CTranslate2's search and no attention.

Each returns the search's finished hypotheses, best first, the first being exactly what
``translate.py`` prints for the same model and search options.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, replace
from functools import partial

import torch

from transformer_nmt.checkpoint import LoadedCheckpoint
from transformer_nmt.data.encoding import encode_texts
from transformer_nmt.decoding import (
    SearchOptions,
    beam_search,
    gnmt_length_penalty,
    greedy_hypotheses,
    largest_beam_size,
)
from transformer_nmt.evaluation import TextTranslator, Translator
from transformer_nmt.evaluation.attention import attention_for_pair

from .attention import KINDS, AttentionMaps

MOST_BEAMS = 16  # the page's beam-size slider ends here (or at what the vocabulary allows)


@dataclass(frozen=True)
class Candidate:
    """One finished hypothesis: its text, ids (no BOS, EOS or pad) and how the search ranked it
    (``score`` = log p / GNMT length penalty; both None where the engine reports none)."""

    text: str
    ids: list[int]
    score: float | None
    log_prob: float | None
    ended_with_eos: bool


@dataclass(frozen=True)
class Translation:
    """The n-best list of one source, and the source as the model read it."""

    source_ids: list[int]  # with the EOS
    candidates: list[Candidate]
    source_tokens_cut: int  # source tokens dropped to fit the model's max_len (0: none)


class DemoModel:
    """A model the page can translate with; ``attention`` is None for engines without it."""

    has_attention = False

    def __init__(self, translator: TextTranslator, src_lang: str, tgt_lang: str, name: str):
        self.translator = translator
        self.src_lang, self.tgt_lang, self.name = src_lang, tgt_lang, name
        self.options = translator.options
        self.most_beams = MOST_BEAMS
        self._lock = threading.Lock()  # one search at a time: the engines are not thread-safe

    def translate(self, text: str, beam_size: int, length_penalty: float) -> Translation:
        """The n-best list (up to ``beam_size`` hypotheses) of one line of text."""
        options = replace(self.options, beam_size=beam_size, length_penalty=length_penalty)
        whole = encode_texts(self.translator.tokenizer, [text])[0]
        source_ids = self.translator.encode([text])[0]
        with self._lock:
            candidates = self.search(source_ids, options)
        return Translation(source_ids, candidates, max(0, len(whole) + 1 - len(source_ids)))

    def search(self, source_ids: list[int], options: SearchOptions) -> list[Candidate]:
        raise NotImplementedError

    def attention(self, translation: Translation, rank: int) -> AttentionMaps | None:
        return None

    def candidate(self, ids: list[int], score, log_prob, ended_with_eos: bool) -> Candidate:
        return Candidate(self.translator.decode(ids), list(ids), score, log_prob, ended_with_eos)


class CheckpointModel(DemoModel):
    """A model of this project: our beam search (or greedy search for beam size 1), and the
    attention of any hypothesis by teacher forcing."""

    has_attention = True

    def __init__(self, checkpoint: LoadedCheckpoint, options: SearchOptions) -> None:
        translator = Translator.from_checkpoint(checkpoint, options)
        super().__init__(translator, checkpoint.src_lang, checkpoint.tgt_lang, str(checkpoint.path))
        self.checkpoint = checkpoint
        self.model = checkpoint.model
        self.most_beams = min(
            MOST_BEAMS, largest_beam_size(self.model, checkpoint.bos_id, checkpoint.eos_id)
        )

    def search(self, source_ids: list[int], options: SearchOptions) -> list[Candidate]:
        src = torch.tensor([source_ids])
        ids = (self.checkpoint.bos_id, self.checkpoint.eos_id)
        if options.beam_size == 1:
            hypotheses = greedy_hypotheses(self.model, src, *ids, options)
        else:
            hypotheses = beam_search(self.model, src, *ids, options, nbest=options.beam_size)[0]
        return [
            self.candidate(h.tokens, h.score, h.log_prob, len(h.token_log_probs) > len(h.tokens))
            for h in hypotheses
        ]

    def attention(self, translation: Translation, rank: int) -> AttentionMaps | None:
        """Every head's attention for the ``rank``-th hypothesis (0 = best); None for an empty
        source."""
        candidate = translation.candidates[rank]
        if not translation.source_ids:
            return None
        tokenizer = self.translator.tokenizer
        decoder_input = [self.checkpoint.bos_id, *candidate.ids]
        predicted = [*candidate.ids, self.checkpoint.eos_id]
        if not candidate.ended_with_eos:  # cut at the length limit: the last position predicts
            decoder_input, predicted = decoder_input[:-1], predicted[:-1]  # nothing shown
        if not predicted:
            return None
        device = next(self.model.parameters()).device
        as_tensor = partial(torch.tensor, device=device)
        with self._lock:
            weights = attention_for_pair(
                self.model, as_tensor(translation.source_ids), as_tensor(decoder_input), KINDS
            )
        tokens = tokenizer.convert_ids_to_tokens
        return AttentionMaps(
            {kind: maps.numpy() for kind, maps in weights.items()},
            tokens(translation.source_ids), tokens(decoder_input), tokens(predicted),
        )  # fmt: skip


class CTranslate2Model(DemoModel):
    """A CTranslate2 export: its beam search, re-ranked by our GNMT score as ``translate.py``
    does; CTranslate2 returns no attention weights."""

    def __init__(self, translator) -> None:
        super().__init__(
            translator, translator.src_lang, translator.tgt_lang, str(translator.model_dir)
        )

    def search(self, source_ids: list[int], options: SearchOptions) -> list[Candidate]:
        from transformer_nmt.evaluation.ctranslate2_translator import LOG_PROB_RANKING

        translator = self.translator
        translator.options = options
        pieces = [translator.tokens[t] for t in source_ids[:-1]]  # CTranslate2 adds the EOS
        # One sentence: one call to its own length limit is exactly translate.py's search.
        (found,) = translator._search([pieces], translator.limit(len(source_ids)))
        if options.beam_size == 1:  # greedy: CTranslate2 returns no score
            return [self.candidate(ids, None, None, False) for ids, _ in found]
        candidates = []
        for ids, score in found:
            log_prob = score * len(ids) ** LOG_PROB_RANKING
            ended = bool(ids) and ids[-1] == translator.eos_id
            gnmt = log_prob / gnmt_length_penalty(len(ids), options.length_penalty)
            candidates.append(self.candidate(ids[:-1] if ended else ids, gnmt, log_prob, ended))
        # stable: among equal scores the first found stays first, as translate.py picks it
        return sorted(candidates, key=lambda c: -c.score if math.isfinite(c.score) else math.inf)
