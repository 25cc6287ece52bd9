"""A Lightning callback that scores real translations (sacreBLEU, chrF) during training."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl

from transformer_nmt.atomic import write_text_atomically
from transformer_nmt.decoding import SearchOptions
from transformer_nmt.evaluation.metrics import CorpusScores
from transformer_nmt.evaluation.scoring import translate_and_score


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
    Python log. ``every_n_epochs=0`` turns validation scoring off.

    Args:
        every_n_epochs: score validation every n epochs; 0 = never.
        max_sentences: score only the first n validation sentences (None = all). Test is
            always scored in full.
        search: how to decode (the config's ``search`` node: beam size, length penalty, ...).
        score_test: also score the test split in ``on_test_epoch_end``.
        hypotheses_dir: if set, write ``hyps.val.epoch<N>.txt`` / ``hyps.test.txt`` there.

    Needs ``pl_module.model`` (a :class:`~transformer_nmt.model.Transformer`) and a
    ``trainer.datamodule`` (see :func:`~transformer_nmt.evaluation.scoring.translate_and_score`).
    Under DDP every rank decodes the whole split (the scores are then identical on all ranks).
    """

    def __init__(
        self,
        every_n_epochs: int,
        max_sentences: int | None,
        search: SearchOptions,
        score_test: bool,
        hypotheses_dir: str | None,
    ) -> None:
        super().__init__()
        if every_n_epochs < 0:
            raise ValueError(f"every_n_epochs must be >= 0 (0 = off), got {every_n_epochs}")
        if max_sentences is not None and max_sentences < 1:
            raise ValueError(f"max_sentences must be positive or None, got {max_sentences}")
        self.every_n_epochs = every_n_epochs
        self.max_sentences = max_sentences
        self.search = search
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
        if trainer.datamodule is None:
            raise ValueError(
                "BleuCallback reads sentences from trainer.datamodule, but there is none; pass "
                "datamodule=... to trainer.fit/test instead of dataloaders"
            )
        scored = translate_and_score(
            pl_module.model, trainer.datamodule, split, self.search, max_sentences
        )
        self._log_signatures(trainer, scored.scores)
        if self.hypotheses_dir is not None and trainer.is_global_zero:
            name = (
                f"hyps.{split}.txt"
                if split == "test"
                else f"hyps.{split}.epoch{trainer.current_epoch}.txt"
            )
            text = "".join(f"{h}\n" for h in scored.hypotheses)
            write_text_atomically(self.hypotheses_dir / name, text)
        return scored.scores

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
