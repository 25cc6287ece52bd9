"""Data pipeline: parallel corpora -> tokenizer -> cached ids -> token-bucketed DDP batches."""

from transformer_nmt.data.bucketing import (
    PadCollator,
    ResumableDataLoader,
    TokenBucketBatchSampler,
    padding_fraction,
)
from transformer_nmt.data.datamodule import TranslationDataModule
from transformer_nmt.data.errors import DataError
from transformer_nmt.data.tokenizer import (
    SpecialIds,
    load_tokenizer,
    restore_tokenizer,
    special_ids,
    tokenizer_files,
)

__all__ = [
    "DataError",
    "PadCollator",
    "ResumableDataLoader",
    "SpecialIds",
    "TokenBucketBatchSampler",
    "TranslationDataModule",
    "load_tokenizer",
    "padding_fraction",
    "restore_tokenizer",
    "special_ids",
    "tokenizer_files",
]
