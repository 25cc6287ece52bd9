"""``python evaluate.py``: translate a split with a checkpoint (or, with ``engine=ct2``, a
CTranslate2 export), score it with sacreBLEU and chrF."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from transformer_nmt.atomic import write_text_atomically
from transformer_nmt.data.datamodule import TranslationDataModule
from transformer_nmt.data.sources import LOGICAL_SPLITS
from transformer_nmt.evaluation import corpus_scores

from .errors import UsageError
from .loading import LoadedTranslator, load_translator

log = logging.getLogger(__name__)


def evaluate_command(cfg: DictConfig) -> dict:
    """Translate one split, print BLEU and chrF with signatures, write hypotheses and scores."""
    if cfg.split not in LOGICAL_SPLITS:
        raise UsageError(f"split must be one of {list(LOGICAL_SPLITS)}, got {cfg.split!r}")
    if cfg.max_sentences is not None and cfg.max_sentences < 1:
        raise UsageError(f"max_sentences must be positive or null, got {cfg.max_sentences}")
    loaded = load_translator(cfg)
    translator = loaded.translator
    pairs = _datamodule_in_model_direction(cfg.data, loaded).raw_pairs(cfg.split)
    if cfg.max_sentences is not None:
        pairs = pairs[: cfg.max_sentences]
    if not pairs:
        raise UsageError(f"split {cfg.split!r} of the data config holds no sentences")
    started = time.perf_counter()
    hypotheses = translator.translate([src for src, _ in pairs])
    seconds = time.perf_counter() - started
    scores = corpus_scores(hypotheses, [tgt for _, tgt in pairs])
    print(scores.bleu_report)
    print(scores.chrf_report)

    output_dir = Path(cfg.output_dir)
    hypotheses_path = output_dir / f"hyps.{cfg.split}.txt"
    write_text_atomically(hypotheses_path, "".join(f"{h}\n" for h in hypotheses))
    report = {
        "bleu": scores.bleu,
        "chrf": scores.chrf,
        "brevity_penalty": scores.brevity_penalty,
        "length_ratio": scores.length_ratio,
        "bleu_signature": scores.bleu_signature,
        "chrf_signature": scores.chrf_signature,
        "bleu_details": scores.bleu_details,
        "chrf_details": scores.chrf_details,
        "split": cfg.split,
        "n_sentences": len(pairs),
        "src_lang": loaded.src_lang,
        "tgt_lang": loaded.tgt_lang,
        "engine": cfg.engine,
        "ckpt": loaded.model if cfg.engine == "torch" else None,
        "model_dir": loaded.model if cfg.engine == "ct2" else None,
        "search": asdict(translator.options),
        "device": loaded.device,
        "decode_seconds": round(seconds, 3),
        "hypotheses_file": str(hypotheses_path),
    }
    scores_path = output_dir / f"scores.{cfg.split}.json"
    write_text_atomically(scores_path, json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    log.info("wrote %s and %s (%.1fs decoding)", hypotheses_path, scores_path, seconds)
    return report


def _datamodule_in_model_direction(data_cfg: DictConfig, loaded: LoadedTranslator):
    """The data config's datamodule, reading pairs in the direction the model translates.

    Only its raw sentences are used: the tokenizer always comes from the model.
    """
    direction = (loaded.src_lang, loaded.tgt_lang)
    configured = (data_cfg.get("src_lang"), data_cfg.get("tgt_lang"))
    if configured != direction:
        log.warning(
            "the model translates %s→%s; reading the data in that direction (the data "
            "config says %s→%s)",
            *direction,
            *configured,
        )
    return TranslationDataModule(
        OmegaConf.to_object(data_cfg), src_lang=loaded.src_lang, tgt_lang=loaded.tgt_lang
    )
