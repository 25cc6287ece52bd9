"""A Lightning callback that scores real translations (sacreBLEU, chrF) during training."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import lightning.pytorch as pl

from transformer_nmt.atomic import write_text_atomically
from transformer_nmt.decoding import translate_token_ids
from transformer_nmt.evaluation.metrics import CorpusScores, corpus_scores

log = logging.getLogger(__name__)


class BleuCallback(pl.Callback):
    """Translate the validation (and test) sentences and log sacreBLEU and chrF.

    Every ``every_n_epochs``-th validation epoch (counting epochs from 1; sanity checks are
    skipped) it decodes ``trainer.datamodule.raw_pairs("val")`` (the first ``max_sentences``
    of them, or all) with ``pl_module.model`` and logs ``val/bleu`` and ``val/chrf`` through
    ``pl_module.log``, so every logger receives them and ``ModelCheckpoint(monitor="val/bleu",
    mode="max")`` can select on them — give that ModelCheckpoint the same ``every_n_epochs``,
    since it fails on a validation that logged no ``val/bleu``. With ``score_test`` it does the
    same for the test split at the end of ``trainer.test`` (``test/bleu``, ``test/chrf``).
    The sacreBLEU signatures go to each logger's hyper-parameters (``sacrebleu/…``) and to the
    Python log. ``every_n_epochs=0`` (the default) turns validation scoring off.

    Args:
        every_n_epochs: score validation every n epochs; 0 = never.
        max_sentences: score only the first n validation sentences (None = all). Test is
            always scored in full.
        beam_size: 1 = greedy search (fast, the default); 4 = the paper's beam search.
        length_penalty: GNMT α for beam search (paper: 0.6).
        max_len_a, max_len_b: outputs stop after a·source length + b tokens (paper: 1, 50).
        batch_size: sentences decoded at once.
        score_test: also score the test split in ``on_test_epoch_end``.
        hypotheses_dir: if set, write ``hyps.val.epoch<N>.txt`` / ``hyps.test.txt`` there.

    Needs ``pl_module.model`` (a :class:`~transformer_nmt.model.Transformer`) and a
    ``trainer.datamodule`` with ``raw_pairs(split) -> list[(src, tgt)]``,
    ``encode_source(texts) -> list[list[int]]`` (ids + EOS, truncated), ``decode(ids) -> str``,
    ``bos_id``, ``eos_id`` and ``pad_id``. Under DDP every rank decodes the whole split (the
    scores are then identical on all ranks).
    """

    def __init__(
        self,
        every_n_epochs: int = 0,
        max_sentences: int | None = None,
        beam_size: int = 1,
        length_penalty: float = 0.6,
        max_len_a: float = 1.0,
        max_len_b: int = 50,
        batch_size: int = 64,
        score_test: bool = True,
        hypotheses_dir: str | None = None,
    ) -> None:
        super().__init__()
        if every_n_epochs < 0:
            raise ValueError(f"every_n_epochs must be >= 0 (0 = off), got {every_n_epochs}")
        if max_sentences is not None and max_sentences < 1:
            raise ValueError(f"max_sentences must be positive or None, got {max_sentences}")
        self.every_n_epochs = every_n_epochs
        self.max_sentences = max_sentences
        self.search_options = dict(
            beam_size=beam_size,
            length_penalty=length_penalty,
            max_len_a=max_len_a,
            max_len_b=max_len_b,
            batch_size=batch_size,
        )
        self.score_test = score_test
        self.hypotheses_dir = Path(hypotheses_dir) if hypotheses_dir else None
        self._signatures_logged = False

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.every_n_epochs == 0 or trainer.sanity_checking:
            return
        if (trainer.current_epoch + 1) % self.every_n_epochs != 0:
            return
        scores = self.score(trainer, pl_module, "val", self.max_sentences)
        pl_module.log("val/bleu", scores.bleu, on_epoch=True, prog_bar=True)
        pl_module.log("val/chrf", scores.chrf, on_epoch=True)

    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self.score_test:
            return
        scores = self.score(trainer, pl_module, "test")
        pl_module.log("test/bleu", scores.bleu, on_epoch=True)
        pl_module.log("test/chrf", scores.chrf, on_epoch=True)

    def score(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        split: str,
        max_sentences: int | None = None,
    ) -> CorpusScores:
        """Translate ``split`` of the trainer's datamodule and score it against its references."""
        datamodule, model = trainer.datamodule, pl_module.model
        if datamodule is None:
            raise ValueError(
                "BleuCallback reads sentences from trainer.datamodule, but there is none; pass "
                "datamodule=... to trainer.fit/test instead of dataloaders"
            )
        if datamodule.pad_id != model.config.pad_id:
            raise ValueError(
                f"the datamodule's pad id {datamodule.pad_id} differs from the model's "
                f"config.pad_id {model.config.pad_id}; build the model from the datamodule's "
                f"tokenizer"
            )
        pairs = datamodule.raw_pairs(split)[:max_sentences]
        sources = datamodule.encode_source([src for src, _ in pairs])
        started = time.perf_counter()
        outputs = translate_token_ids(
            model, sources, datamodule.bos_id, datamodule.eos_id, **self.search_options
        )
        seconds = time.perf_counter() - started
        hypotheses = [datamodule.decode(ids) for ids in outputs]
        scores = corpus_scores(hypotheses, [tgt for _, tgt in pairs])
        log.info(
            "%s (epoch %d, %d sentences decoded in %.1fs): %s | %s",
            split,
            trainer.current_epoch,
            len(pairs),
            seconds,
            scores.bleu_report,
            scores.chrf_report,
        )
        self._log_signatures(trainer, scores)
        if self.hypotheses_dir is not None and trainer.is_global_zero:
            name = (
                f"hyps.{split}.txt"
                if split == "test"
                else f"hyps.{split}.epoch{trainer.current_epoch}.txt"
            )
            write_text_atomically(self.hypotheses_dir / name, "".join(f"{h}\n" for h in hypotheses))
        return scores

    def _log_signatures(self, trainer: pl.Trainer, scores: CorpusScores) -> None:
        if self._signatures_logged:
            return
        signatures = {
            "sacrebleu/bleu_signature": scores.bleu_signature,
            "sacrebleu/chrf_signature": scores.chrf_signature,
        }
        for logger in trainer.loggers:
            logger.log_hyperparams(signatures)
        self._signatures_logged = True
