"""After training: score the final weights once on val/test (loss, perplexity, optionally BLEU).

The ``final_eval`` config group of ``conf/train.yaml`` drives it. A sweep's table needs one number
per run measured at the end of the budget, whatever the validation interval was or however
``trainer.max_time`` cut the run short: :func:`final_evaluation` validates again unless the last
validation already saw the final step, runs ``trainer.test``, and decodes each split for
sacreBLEU/chrF when ``bleu`` is set (once per run, so slow decoding never runs every epoch).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from transformer_nmt.decoding import SearchOptions
from transformer_nmt.evaluation.scoring import translate_and_score
from transformer_nmt.tracking.summary import finite_metrics

if TYPE_CHECKING:
    import lightning.pytorch as pl

log = logging.getLogger(__name__)

SPLITS = ("val", "test")


@dataclass
class FinalEvalConfig:
    """What is scored once after training: the schema of the ``final_eval`` config node."""

    splits: list[str] = field(default_factory=lambda: list(SPLITS))  # [] turns it off
    bleu: bool = False  # also decode each split (the ``search`` options) for sacreBLEU and chrF
    max_sentences: int | None = None  # decode only the first n sentences of each split

    def __post_init__(self) -> None:
        unknown = sorted(set(self.splits) - set(SPLITS))
        if unknown:
            raise ValueError(
                f"final_eval.splits has unknown split(s) {unknown}; use {list(SPLITS)}"
            )
        if self.max_sentences is not None and self.max_sentences < 1:
            raise ValueError(
                f"final_eval.max_sentences must be positive or null, got {self.max_sentences}"
            )


def final_evaluation(
    trainer: pl.Trainer,
    module: pl.LightningModule,
    datamodule: pl.LightningDataModule,
    config: FinalEvalConfig,
    search: SearchOptions,
) -> dict[str, float | None]:
    """``{split}/loss``, ``/nll``, ``/ppl`` (and ``/bleu``, ``/chrf``) of the final weights.

    Metrics go to the trainer's loggers as well (validation and test through Lightning, BLEU
    and chrF with :meth:`Logger.log_metrics` at the final step). Every rank must call this.
    """
    metrics: dict[str, float | None] = {}
    for split in config.splits:
        if split == "val" and getattr(module, "last_validated_step", None) == trainer.global_step:
            results = trainer.callback_metrics  # the last validation saw these very weights
        else:  # one dict per dataloader; none when trainer.limit_{val,test}_batches=0
            run = trainer.validate if split == "val" else trainer.test
            results = next(iter(run(module, datamodule=datamodule, verbose=False)), {})
        metrics.update(finite_metrics(results, prefix=f"{split}/"))
        if config.bleu and f"{split}/bleu" not in metrics:  # a BleuCallback may have scored it
            scored = translate_and_score(
                module.model, datamodule, split, search, config.max_sentences
            )
            bleu = {f"{split}/bleu": scored.scores.bleu, f"{split}/chrf": scored.scores.chrf}
            for logger in trainer.loggers:
                logger.log_metrics(bleu, step=trainer.global_step)
            metrics.update(bleu)
    log.info("final evaluation at step %d: %s", trainer.global_step, _format(metrics))
    return metrics


def _format(metrics: Mapping[str, float | None]) -> str:
    return ", ".join(f"{k}={'nan' if v is None else format(v, '.4g')}" for k, v in metrics.items())
