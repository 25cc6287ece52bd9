"""An epoch of Multi30k training: token-bucketed batches vs every sentence padded to 64.

    python benchmarks/bench_epoch.py [--fraction 0.05] [--max-tokens 2048]
        [--padded-batch-size 32] [--json out.json]

Both train the Multi30k model (``conf/experiment/multi30k.yaml``: pre-norm, d_model 256,
4 heads, 3+3 layers, d_ff 1024, 8k joint BPE, ``attention=sdpa``), from the same initial
weights, with Adam and label-smoothed cross-entropy, on the same sentences:

* token buckets — the data module's ``TokenBucketBatchSampler``: length-sorted runs of at most
  ``--max-tokens`` padded tokens per side (2048 in the Multi30k experiment), batches shuffled;
* padded to 64 — shuffled batches of ``--padded-batch-size`` sentences (32 x 64 = the same 2048
  padded tokens per batch), every sentence padded to 64 tokens.

Both epochs' batches are built from all 29,000 training pairs; a random ``--fraction`` of each
epoch's batches is timed (``--fraction 1``: the whole epoch) and the epoch time extrapolated
as (mean time per timed batch) x (batches per epoch). The two run interleaved batch by batch —
whichever is further behind (in share of its timed batches) goes next — so both see the same
machine load. tokens/s counts target (non-pad) tokens.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from competitors import our_config  # noqa: E402
from timing import (  # noqa: E402
    Result,
    adam_step,
    apply_machine_options,
    benchmark_parser,
    dump_json,
    load_average,
    multi30k,
    print_header,
)

from transformer_nmt.data import TokenBucketBatchSampler  # noqa: E402
from transformer_nmt.model import Transformer  # noqa: E402

PAD_TO_LENGTH = 64


def pad_to(batch: dict, width: int, pad_id: int) -> dict:
    """Pad every [B, T] tensor of a collated batch to [B, width]."""
    out = dict(batch)
    for key in ("src_ids", "tgt_in_ids", "labels"):
        tensor = batch[key]
        out[key] = F.pad(tensor, (0, width - tensor.size(1)), value=pad_id)
    return out


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument(
        "--fraction", type=float, default=0.05, help="share of each epoch's batches to time"
    )
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument(
        "--padded-batch-size", type=int, default=32, help="sentences per padded-to-64 batch"
    )
    args = parser.parse_args()
    malloc_tuned = apply_machine_options(args)

    machine = print_header("An epoch of Multi30k: token buckets vs padding to 64", malloc_tuned)
    with multi30k(args.data_dir, args.max_tokens, args.seed) as dm:
        train = dm.datasets["train"]
        examples = [train[i] for i in range(len(train))]
        collate, pad_id, vocab = dm.collator, dm.pad_id, dm.vocab_size
        lengths, src_lengths, tgt_lengths = train.lengths, train.src_lengths, train.tgt_lengths
    too_long = int((lengths > PAD_TO_LENGTH).sum())
    if too_long:
        raise SystemExit(f"{too_long} sentences are longer than {PAD_TO_LENGTH} tokens")

    samplers = {
        f"token buckets (≤{args.max_tokens} tokens)": TokenBucketBatchSampler(
            lengths, tiebreak_lengths=src_lengths, max_tokens=args.max_tokens, seed=args.seed
        ),
        f"padded to 64 ({args.padded_batch_size} sentences)": TokenBucketBatchSampler(
            lengths, max_sentences=args.padded_batch_size, bucket_by_length=False, seed=args.seed
        ),
    }
    rng = np.random.default_rng(args.seed)
    plans, epoch_stats = {}, {}
    for name, sampler in samplers.items():
        batches = [list(batch) for batch in sampler]
        width = PAD_TO_LENGTH if name.startswith("padded") else None
        cells = real = tokens = 0
        for batch in batches:  # padding share and target tokens of the whole epoch
            src = src_lengths[batch]
            tgt = tgt_lengths[batch]
            cells += len(batch) * ((width or src.max()) + (width or tgt.max()))
            real += int(src.sum() + tgt.sum())
            tokens += int(tgt.sum())
        epoch_stats[name] = (len(batches), 1 - real / cells, tokens)
        count = max(1, round(args.fraction * len(batches)))
        chosen = sorted(rng.choice(len(batches), size=min(count, len(batches)), replace=False))
        plans[name] = []
        for index in chosen:
            batch = collate([examples[i] for i in batches[index]])
            plans[name].append(pad_to(batch, width, pad_id) if width else batch)

    torch.manual_seed(args.seed)
    config = our_config(
        "small", vocab_size=vocab, norm="pre", attention="sdpa", pad_id=pad_id, max_len=256
    )
    first = Transformer(config).train()
    steps = {}
    for name in plans:
        model = Transformer(config).train()
        model.load_state_dict(first.state_dict())
        steps[name] = adam_step(model, model.parameters(), pad_id)
    for name, batches in plans.items():  # warm-up: one batch of each
        steps[name](batches[0])

    done = dict.fromkeys(plans, 0)
    seconds = dict.fromkeys(plans, 0.0)
    while any(done[name] < len(plans[name]) for name in plans):
        name = min(
            (n for n in plans if done[n] < len(plans[n])),
            key=lambda n: done[n] / len(plans[n]),
        )
        start = time.perf_counter()
        steps[name](plans[name][done[name]])
        seconds[name] += time.perf_counter() - start
        done[name] += 1

    print(f"# {len(train)} training pairs; pre-norm small model (sdpa), vocab {vocab}")
    reference = next(iter(plans))
    epoch_seconds = {
        name: seconds[name] / len(plans[name]) * epoch_stats[name][0] for name in plans
    }
    print("\n## one epoch of Multi30k (extrapolated from the timed batches)")
    print(
        "| batching | batches/epoch | pad share | timed batches | epoch s | tokens/s | "
        f"{reference.split(' (')[0]} speed-up |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    results = {}
    for name in plans:
        n_batches, pad_share, tokens = epoch_stats[name]
        result = Result(name, seconds=[epoch_seconds[name]], tokens=tokens)
        result.note = f"{n_batches} batches, {pad_share:.0%} padding"
        results[name] = result
        print(
            f"| {name} | {n_batches} | {pad_share:.0%} | {len(plans[name])} "
            f"| {epoch_seconds[name]:.0f} | {tokens / epoch_seconds[name]:.0f} "
            f"| {epoch_seconds[name] / epoch_seconds[reference]:.2f}x |"
        )
    print(f"\n# load average at the end: {load_average()}")
    dump_json(args.json, machine, {"epoch": results})


if __name__ == "__main__":
    main()
