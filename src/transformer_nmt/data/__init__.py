"""Data pipeline: parallel corpora -> tokenizer -> cached ids -> token-bucketed DDP batches."""

from typing import Any

from transformer_nmt.data.bucketing import (
    PadCollator,
    ResumableDataLoader,
    TokenBucketBatchSampler,
    padding_fraction,
)
from transformer_nmt.data.config import DataConfig
from transformer_nmt.data.errors import DataError
from transformer_nmt.data.tokenizer import (
    SpecialIds,
    load_tokenizer,
    restore_tokenizer,
    special_ids,
    tokenizer_files,
    tokenizer_identity,
)

__all__ = [
    "DataConfig",
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
    "tokenizer_identity",
]


def __getattr__(name: str) -> Any:
    # The data module imports Lightning, which takes seconds: only when it is asked for, so that
    # reading the config schemas (`python train.py --cfg job`) stays fast.
    if name == "TranslationDataModule":
        from transformer_nmt.data.datamodule import TranslationDataModule

        return TranslationDataModule
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
