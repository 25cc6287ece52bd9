"""Data pipeline figures on Multi30k: setup times (cold and cached) and padding per batch.

    python benchmarks/data_padding.py [--data-dir /path/to/multi30k] [--vocab-size 8000]
        [--max-tokens 4096] [--batch-size 128] [--epochs 3]

The cold run trains the BPE and encodes every split into a fresh temporary cache (unless
--cache-dir is given); the cached run builds a second datamodule over the same cache. Padding
is the share of pad cells in the padded source + target tensors, averaged over the training
batches of ``--epochs`` epochs, for: token buckets (``max_tokens``), fixed shuffled batches of
``--batch-size`` sentences, fixed batches cut from length-sorted order, and every sentence
padded to 64 tokens. ``--data-dir`` defaults to ``$MULTI30K_DIR``, else ``data/multi30k``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from transformer_nmt.data import TokenBucketBatchSampler, TranslationDataModule, padding_fraction

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = os.environ.get("MULTI30K_DIR", str(REPO_ROOT / "data" / "multi30k"))
PAD_TO_LENGTH = 64


def build(args: argparse.Namespace, cache_dir: str) -> tuple[TranslationDataModule, float, float]:
    """A set-up datamodule, seconds to get its tokenizer, seconds to encode/load all splits."""
    dm = TranslationDataModule(
        source="text_files",
        data_dir=args.data_dir,
        splits={"test": "test_2016_flickr"},
        vocab_size=args.vocab_size,
        max_tokens=args.max_tokens,
        cache_dir=cache_dir,
    )
    start = time.perf_counter()
    _ = dm.tokenizer
    tokenizer_seconds = time.perf_counter() - start
    start = time.perf_counter()
    dm.setup(None)
    return dm, tokenizer_seconds, time.perf_counter() - start


def epoch_padding(sampler: TokenBucketBatchSampler, src, tgt, epochs: int) -> tuple[float, float]:
    """Mean padding fraction and mean sentences per batch over ``epochs`` epochs."""
    fractions, sizes = [], []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        fractions.append(padding_fraction(src, tgt, batches))
        sizes.append(np.mean([len(b) for b in batches]))
    return float(np.mean(fractions)), float(np.mean(sizes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--data-dir",
        default=DEFAULT_DATA_DIR,
        help="Multi30k (default: $MULTI30K_DIR, else data/multi30k)",
    )
    parser.add_argument("--cache-dir", default=None, help="default: a fresh temporary directory")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="transformer_nmt_bench_") as scratch:
        cache_dir = args.cache_dir or scratch
        dm, cold_tokenizer, cold_encode = build(args, cache_dir)
        _, warm_tokenizer, warm_encode = build(args, cache_dir)
        train = dm.datasets["train"]
        src, tgt = train.src_lengths, train.tgt_lengths
        samplers = {
            f"token buckets (max_tokens={args.max_tokens})": TokenBucketBatchSampler(
                train.lengths, tiebreak_lengths=src, max_tokens=args.max_tokens
            ),
            f"fixed shuffled (batch_size={args.batch_size})": TokenBucketBatchSampler(
                train.lengths, max_sentences=args.batch_size, bucket_by_length=False
            ),
            f"fixed length-sorted (batch_size={args.batch_size})": TokenBucketBatchSampler(
                train.lengths, tiebreak_lengths=src, max_sentences=args.batch_size
            ),
        }
        print(f"Multi30k at {args.data_dir}: {len(train)} training pairs, BPE {dm.vocab_size}")
        print(f"cold:   BPE training {cold_tokenizer:.2f} s, encoding 3 splits {cold_encode:.2f} s")
        print(f"cached: tokenizer load {warm_tokenizer:.2f} s, splits load {warm_encode:.2f} s")
        print(f"mean padding fraction per training batch over {args.epochs} epochs:")
        for name, sampler in samplers.items():
            padding, size = epoch_padding(sampler, src, tgt, args.epochs)
            print(f"  {name:<40} {padding:6.1%}  ({size:.0f} sentences/batch)")
        padded_cells = 2 * PAD_TO_LENGTH * len(train)
        real = np.minimum(src, PAD_TO_LENGTH).sum() + np.minimum(tgt, PAD_TO_LENGTH).sum()
        print(f"  {'every sentence padded to 64':<40} {1 - real / padded_cells:6.1%}")


if __name__ == "__main__":
    main()
