"""The LightningDataModule that turns a parallel corpus into padded translation batches."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from hydra.utils import to_absolute_path
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from torch.utils.data import DataLoader

from transformer_nmt.data import multi30k
from transformer_nmt.data.bucketing import (
    PadCollator,
    ResumableDataLoader,
    SharingDataLoader,
    TokenBucketBatchSampler,
)
from transformer_nmt.data.config import DataConfig, default_cache_dir
from transformer_nmt.data.encoding import (
    OVERLONG_POLICIES,
    TranslationExamples,
    encode_texts,
    encoded_cache_entry,
    load_or_encode,
)
from transformer_nmt.data.errors import DataError
from transformer_nmt.data.sources import (
    LOGICAL_SPLITS,
    SOURCES,
    ParallelSplit,
    open_files_split,
    open_hub_split,
    open_text_files_split,
    resolve_splits,
)
from transformer_nmt.data.tokenizer import (
    bpe_cache_entry,
    load_or_train_bpe,
    load_tokenizer,
    special_ids,
    tokenizer_fingerprint,
)

log = logging.getLogger(__name__)

TOKENIZERS = ("bpe", "pretrained")
_STAGE_SPLITS = {
    "fit": ("train", "val"),
    "validate": ("val",),
    "test": ("test",),
    "predict": ("test",),
    None: LOGICAL_SPLITS,
}
_MAX_ENCODING_PROCESSES = 8
_FAR_BELOW_VOCAB = 0.75  # a BPE smaller than this share of data.vocab_size gets a warning


class TranslationDataModule(pl.LightningDataModule):
    """Parallel text from the Hub (WMT16), WMT16-schema files, Multi30k (downloaded or local) or
    a Multi30k-layout directory, as a :class:`~transformer_nmt.data.config.DataConfig` says.

    ``prepare_data`` downloads, trains/loads the tokenizer and tokenises every split into the
    cache; ``setup`` loads what its stage needs (building anything missing, so it also works
    without ``prepare_data``). Batches are dicts of ``src_ids`` / ``tgt_in_ids`` / ``labels``
    (padded with ``pad_id``) and ``ids`` (positions in :meth:`raw_pairs`). Training batches
    hold at most ``max_tokens`` padded tokens per side (sentences x longest, at most
    ``batch_size`` sentences if that is set too) or, with ``max_tokens=None``, ``batch_size``
    shuffled sentences; under DDP every rank gets a disjoint shard of the same number of batches
    (needs ``Trainer(use_distributed_sampler=False)``). Training pairs with an empty side, and
    with ``overlong=drop`` those with a side over ``max_len``, are dropped; validation and test
    keep every pair so they match their references.
    """

    def __init__(self, config: DataConfig | None = None, **options: Any) -> None:
        """``TranslationDataModule(config)``, or keyword options for :class:`DataConfig`'s
        fields (``TranslationDataModule(source="text_files", data_dir=...)``), or both."""
        super().__init__()
        config = replace(config or DataConfig(), **options)
        # saved in checkpoints but not merged into the logger's hparams: Lightning raises there if
        # the model's hparams share a key (vocab_size, max_len, seed) with a different value
        self.save_hyperparameters(asdict(config), logger=False)
        _check_options(config)
        self.config = config
        self.source = config.source
        self.data_dir = Path(to_absolute_path(config.data_dir)) if config.data_dir else None
        self.data_files = _absolute_data_files(config.data_files)
        self.physical_splits = resolve_splits(config.source, config.train_split, config.splits)
        self.src_lang, self.tgt_lang = config.src_lang, config.tgt_lang
        self.max_len, self.max_tokens = config.max_len, config.max_tokens
        self.batch_size, self.num_workers, self.seed = (
            config.batch_size,
            config.num_workers,
            config.seed,
        )
        cache_dir = os.path.expanduser(config.cache_dir or default_cache_dir())
        self.cache_dir = Path(to_absolute_path(cache_dir))
        self.encoding_processes = min(_MAX_ENCODING_PROCESSES, os.cpu_count() or 1)

        self._opened: dict[str, ParallelSplit] = {}
        self._fingerprints: dict[str, str] = {}
        self._tokenizer = None
        self._tokenizer_dir: str | None = None
        self.datasets: dict[str, TranslationExamples] = {}
        self._raw_pairs: dict[str, list[tuple[str, str]]] = {}

    # -- Lightning hooks ---------------------------------------------------------------------

    def prepare_data(self) -> None:
        """Download, train or load the tokenizer and tokenise all splits into the cache."""
        for split in LOGICAL_SPLITS:
            self._examples(split)

    def setup(self, stage: str | None = None) -> None:
        """Load the examples of the splits ``stage`` needs (fit/validate/test/predict/None)."""
        if stage not in _STAGE_SPLITS:
            raise ValueError(f"unknown stage {stage!r}; expected one of {list(_STAGE_SPLITS)}")
        for split in _STAGE_SPLITS[stage]:
            self._examples(split)

    def train_dataloader(self) -> DataLoader:
        examples = self._examples("train")
        return ResumableDataLoader(
            examples,
            batch_sampler=self._batch_sampler(examples, shuffle=True),
            collate_fn=self.collator,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            pin_memory=torch.cuda.is_available(),
        )

    def val_dataloader(self) -> DataLoader:
        return self._eval_dataloader("val")

    def test_dataloader(self) -> DataLoader:
        return self._eval_dataloader("test")

    # -- tokenizer -----------------------------------------------------------------------------

    @property
    def tokenizer(self):
        """The tokenizer (loaded, or trained and cached for ``bpe``, on first use)."""
        if self._tokenizer is None:
            self._tokenizer, self._tokenizer_dir = self._load_or_build_tokenizer()
        return self._tokenizer

    @property
    def tokenizer_dir(self) -> str:
        """What :func:`~transformer_nmt.data.load_tokenizer` rebuilds the tokenizer from."""
        _ = self.tokenizer
        return self._tokenizer_dir

    @property
    def vocab_size(self) -> int:
        """Size of the vocabulary shared by source and target, ``len(tokenizer)``."""
        return len(self.tokenizer)

    @property
    def pad_id(self) -> int:
        return special_ids(self.tokenizer).pad

    @property
    def bos_id(self) -> int:
        """The decoder start id (Marian: its ``decoder_start_token_id``, the pad id)."""
        return special_ids(self.tokenizer).bos

    @property
    def eos_id(self) -> int:
        return special_ids(self.tokenizer).eos

    @property
    def collator(self) -> PadCollator:
        return PadCollator(self.pad_id, self.bos_id, self.eos_id)

    def encode_source(self, texts: Sequence[str]) -> list[list[int]]:
        """Source ids + EOS, truncated to ``max_len`` tokens (with a warning counting them)."""
        body = self.max_len - 1
        encoded = encode_texts(self.tokenizer, texts)
        too_long = sum(len(ids) > body for ids in encoded)
        if too_long:
            log.warning(
                "%d of %d source sentences are longer than max_len=%d tokens (EOS included); "
                "they are translated from their first %d tokens",
                too_long,
                len(encoded),
                self.max_len,
                body,
            )
        return [ids[:body] + [self.eos_id] for ids in encoded]

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        """Target text of ``ids``, up to the first EOS, without special tokens."""
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        if self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def raw_pairs(self, split: str) -> list[tuple[str, str]]:
        """The untokenised (source, target) pairs of logical ``split``, in corpus order."""
        if split not in self._raw_pairs:
            src, tgt = self._split(split).read()
            self._raw_pairs[split] = list(zip(src, tgt, strict=True))
        return self._raw_pairs[split]

    # -- internals -----------------------------------------------------------------------------

    def _split(self, split: str) -> ParallelSplit:
        if split not in LOGICAL_SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {list(LOGICAL_SPLITS)}")
        if split not in self._opened:
            physical = self.physical_splits[split]
            langs = (self.src_lang, self.tgt_lang)
            if self.source in ("text_files", "multi30k"):
                self._opened[split] = open_text_files_split(self._text_dir(), physical, *langs)
            elif self.source == "wmt16_files":
                self._opened[split] = open_files_split(self.data_files, physical, *langs)
            else:
                self._opened[split] = open_hub_split(
                    self.config.hub_name, self.config.hub_config, physical, *langs
                )
        return self._opened[split]

    def _text_dir(self) -> Path:
        """The directory of ``{split}.{lang}[.gz]`` files (Multi30k: downloaded if not given)."""
        if self.data_dir is None and self.source == "multi30k":
            self.data_dir = multi30k.multi30k_dir(self.cache_dir)
        return self.data_dir

    def _fingerprint(self, split: str) -> str:
        if split not in self._fingerprints:
            self._fingerprints[split] = self._split(split).fingerprint()
        return self._fingerprints[split]

    def _load_or_build_tokenizer(self) -> tuple[object, str]:
        if self.config.tokenizer == "pretrained":
            return load_tokenizer(self.config.tokenizer_name), self.config.tokenizer_name
        train = self._split("train")
        corpus_key = (
            self._fingerprint("train") + "|" + "-".join(sorted((self.src_lang, self.tgt_lang)))
        )
        sample = self.config.bpe_sample_pairs
        entry = bpe_cache_entry(self.cache_dir, corpus_key, self.config.vocab_size, sample)

        def training_texts():
            """Both sides of the (sampled) training pairs, a chunk at a time; too few: an error."""
            pairs = 0
            for src, tgt in train.sample_chunks(sample):
                pairs += len(src)
                yield src
                yield tgt
            if pairs < self.config.min_train_pairs:
                raise self._too_few_pairs(train, f"{pairs} sentence pairs")

        tokenizer, trained = load_or_train_bpe(entry, self.config.vocab_size, training_texts)
        action = "trained" if trained else "loaded cached"
        _log_once(f"{action} joint BPE tokenizer ({len(tokenizer)} types) at {entry}")
        if len(tokenizer) < _FAR_BELOW_VOCAB * self.config.vocab_size:
            _warn_once(
                f"the joint BPE has {len(tokenizer)} types, far below data.vocab_size="
                f"{self.config.vocab_size}: the training split {train.description} has too few "
                f"distinct words for that many; lower data.vocab_size or train on more data"
            )
        return tokenizer, str(entry)

    def _too_few_pairs(self, train: ParallelSplit, what: str) -> DataError:
        return DataError(
            f"the training split {train.description} holds only {what}; at least "
            f"data.min_train_pairs={self.config.min_train_pairs} are needed to train a "
            f"translation model. Point the data config at the full corpus (an empty or cut-off "
            f"file, or the wrong split?), or lower data.min_train_pairs to train on it anyway"
        )

    def _examples(self, split: str) -> TranslationExamples:
        if split not in self.datasets:
            opened = self._split(split)
            tokenizer_key = tokenizer_fingerprint(self.tokenizer)
            entry = encoded_cache_entry(self.cache_dir, self._fingerprint(split), tokenizer_key)
            encoded, _ = load_or_encode(entry, opened, self.tokenizer, self.encoding_processes)
            training = split == "train"
            examples = TranslationExamples(
                encoded,
                max_len=self.max_len,
                drop_empty=training,
                drop_overlong=training and self.config.overlong == "drop",
            )
            _log_once(examples.stats.describe(split, self.max_len))
            if training and len(examples) < self.config.min_train_pairs:
                stats = examples.stats
                raise self._too_few_pairs(
                    opened,
                    f"{len(examples)} usable pairs ({stats.pairs} read, {stats.dropped_empty} "
                    f"with an empty side and {stats.dropped_overlong} over max_len={self.max_len} "
                    f"tokens left out)",
                )
            self.datasets[split] = examples
            if training:  # let go of the corpus (a memory map the preparation read through)
                self._opened.pop(split, None)
        return self.datasets[split]

    def _eval_dataloader(self, split: str) -> DataLoader:
        examples = self._examples(split)
        return SharingDataLoader(
            examples,
            batch_sampler=self._batch_sampler(examples, shuffle=False),
            collate_fn=self.collator,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            pin_memory=torch.cuda.is_available(),
        )

    def _batch_sampler(self, examples: TranslationExamples, shuffle: bool):
        rank, world_size = self._distributed_context()
        return TokenBucketBatchSampler(
            examples.lengths,
            tiebreak_lengths=examples.src_lengths,
            max_tokens=self.max_tokens,
            max_sentences=self.batch_size,
            bucket_by_length=self.max_tokens is not None,
            shuffle=shuffle,
            seed=self.seed,
            rank=rank,
            world_size=world_size,
        )

    def _distributed_context(self) -> tuple[int, int]:
        """(rank, world size): from the attached trainer, else torch.distributed, else (0, 1)."""
        if self.trainer is not None:
            return self.trainer.global_rank, self.trainer.world_size
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank(), torch.distributed.get_world_size()
        return 0, 1


def _check_options(config: DataConfig) -> None:
    """Every option error that needs no file or network, before any data work."""
    if config.source not in SOURCES:
        raise DataError(f"unknown source {config.source!r}; expected one of {list(SOURCES)}")
    if config.source == "multi30k" and not config.data_dir:
        unknown = sorted(
            {config.train_split, *(config.splits or {}).values()} - {*multi30k.SPLITS, None}
        )
        if unknown:
            raise DataError(
                f"Multi30k has no split {unknown[0]!r}; its splits are {list(multi30k.SPLITS)}, "
                f"e.g. data.splits.test=test_2017_flickr"
            )
    if config.source == "text_files" and not config.data_dir:
        raise DataError(
            "source=text_files needs data_dir, a directory of {split}.{lang}[.gz] files: set "
            "data.data_dir=/path/to/corpus"
        )
    if config.source == "wmt16_files" and not config.data_files:
        raise DataError(
            "source=wmt16_files needs data_files={'train': path, 'validation': path, "
            "'test': path} of jsonl/parquet rows {'translation': {lang: text}}"
        )
    if config.tokenizer not in TOKENIZERS:
        raise DataError(
            f"unknown tokenizer {config.tokenizer!r}; expected one of {list(TOKENIZERS)}"
        )
    if config.tokenizer == "pretrained" and not config.tokenizer_name:
        raise DataError(
            "tokenizer=pretrained needs tokenizer_name, e.g. Helsinki-NLP/opus-mt-en-de"
        )
    if config.src_lang == config.tgt_lang:
        raise DataError(f"src_lang and tgt_lang are both {config.src_lang!r}")
    if config.max_len < 2:
        raise DataError(f"max_len={config.max_len} leaves no room for a token plus BOS/EOS")
    if config.bpe_sample_pairs is not None and config.bpe_sample_pairs < 1:
        raise DataError(
            f"bpe_sample_pairs={config.bpe_sample_pairs}: the BPE needs a positive number of "
            f"sampled training pairs, or null to learn from all of them"
        )
    if config.min_train_pairs < 0:
        raise DataError(f"min_train_pairs={config.min_train_pairs} must be 0 (no check) or more")
    if config.overlong not in OVERLONG_POLICIES:
        raise DataError(
            f"unknown overlong={config.overlong!r}; expected one of {list(OVERLONG_POLICIES)} "
            f"(what happens to training pairs with a side over max_len)"
        )
    if config.max_tokens is None and config.batch_size is None:
        raise DataError("set max_tokens (token budget per batch) or batch_size")
    if config.max_tokens is not None and config.max_tokens < config.max_len:
        raise DataError(f"max_tokens={config.max_tokens} must be at least max_len={config.max_len}")


def _absolute_data_files(data_files: Mapping | None) -> dict | None:
    if data_files is None:
        return None
    absolute = {}
    for split, paths in dict(data_files).items():
        if isinstance(paths, str | os.PathLike):
            absolute[split] = to_absolute_path(str(paths))
        else:
            absolute[split] = [to_absolute_path(str(p)) for p in paths]
    return absolute


@rank_zero_only
def _log_once(message: str) -> None:
    log.info(message)


@rank_zero_only
def _warn_once(message: str) -> None:
    log.warning(message)
