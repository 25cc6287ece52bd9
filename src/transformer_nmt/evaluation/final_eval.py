"""After training: score the final weights once on val/test (loss, perplexity, optionally BLEU).

The ``final_eval`` config group of ``conf/train.yaml`` drives it. A sweep's table needs one number
per run measured at the end of the budget, whatever the validation interval was or however
``trainer.max_time`` cut the run short: :func:`final_evaluation` validates again unless the last
validation already saw the final step, runs ``trainer.test``, and decodes each split for
sacreBLEU/chrF when ``bleu`` is set (once per run, so slow decoding never runs every epoch).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import lightning.pytorch as pl

from transformer_nmt.tracking.summary import finite_metrics

log = logging.getLogger(__name__)

SPLITS = ("val", "test")


def final_evaluation(
    trainer: pl.Trainer,
    module: pl.LightningModule,
    datamodule: pl.LightningDataModule,
    splits: Sequence[str] = SPLITS,
    bleu: bool = False,
    beam_size: int = 1,
    max_sentences: int | None = None,
) -> dict[str, float | None]:
    """``{split}/loss``, ``/nll``, ``/ppl`` (and ``/bleu``, ``/chrf``) of the final weights.

    Metrics go to the trainer's loggers as well (validation and test through Lightning, BLEU
    and chrF with :meth:`Logger.log_metrics` at the final step). Every rank must call this.
    """
    unknown = sorted(set(splits) - set(SPLITS))
    if unknown:
        raise ValueError(f"final_eval.splits has unknown split(s) {unknown}; use {list(SPLITS)}")
    metrics: dict[str, float | None] = {}
    for split in splits:
        if split == "val" and getattr(module, "last_validated_step", None) == trainer.global_step:
            results = trainer.callback_metrics  # the last validation saw these very weights
        elif split == "val":
            results = trainer.validate(module, datamodule=datamodule, verbose=False)[0]
        else:
            results = trainer.test(module, datamodule=datamodule, verbose=False)[0]
        metrics.update(finite_metrics(results, prefix=f"{split}/"))
        if bleu and f"{split}/bleu" not in metrics:  # a BleuCallback may have scored it already
            metrics.update(_bleu(trainer, module, split, beam_size, max_sentences))
    log.info("final evaluation at step %d: %s", trainer.global_step, _format(metrics))
    return metrics


def _bleu(trainer, module, split, beam_size, max_sentences) -> dict[str, float]:
    from transformer_nmt.callbacks import BleuCallback

    scorer = BleuCallback(beam_size=beam_size, score_test=False)
    scores = scorer.score(trainer, module, split, max_sentences)
    metrics = {f"{split}/bleu": scores.bleu, f"{split}/chrf": scores.chrf}
    for logger in trainer.loggers:
        logger.log_metrics(metrics, step=trainer.global_step)
    return metrics


def _format(metrics: Mapping[str, float | None]) -> str:
    return ", ".join(f"{k}={'nan' if v is None else format(v, '.4g')}" for k, v in metrics.items())
