"""A training step of our Transformer against HF Marian and ``torch.nn.Transformer``.

    python benchmarks/bench_train_step.py [--sizes small base] [--threads 1] [--quick]

Each competitor has the same shape (``workload.SIZES``: small is the Multi30k recipe's, base the
paper's; post-norm, dropout 0.1, one vocabulary shared by the embeddings and the output layer)
and takes the same step on the same token-bucket batches of random ids: forward,
label-smoothed cross-entropy (ε = 0.1, ``F.cross_entropy`` for all), backward, Adam. Times are
medians (``Timer.blocked_autorange``); tokens/s counts target (non-pad) tokens.
``--keep-freed-host-memory`` tunes glibc's malloc as ``train.py`` does (for every competitor).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import median_s, print_table  # noqa: E402
from workload import (  # noqa: E402
    PAD,
    SIZES,
    TorchTransformerNMT,
    build_marian,
    marian_logits,
    our_config,
    token_bucket_batches,
)

from transformer_nmt.model import Transformer  # noqa: E402

MAX_TOKENS = 4096  # padded tokens a side: the Multi30k recipe's batch


def adam_steps(forward, parameters, batches: list[dict]):
    """A function taking one Adam step (β = (0.9, 0.98), ε = 1e-9) on each batch."""
    optimizer = torch.optim.Adam(parameters, lr=1e-4, betas=(0.9, 0.98), eps=1e-9)

    def run() -> None:
        for batch in batches:
            logits = forward(batch["src_ids"], batch["tgt_in_ids"])
            loss = F.cross_entropy(
                logits.flatten(0, 1),
                batch["labels"].flatten(),
                ignore_index=PAD,
                label_smoothing=0.1,
            )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

    return run


def competitors(size: str, batches: list[dict]) -> dict:
    torch.manual_seed(0)
    config = our_config(size)
    ours = Transformer(config).train()
    manual = Transformer(our_config(size, attention="manual")).train()
    marian = build_marian(config).train()
    wrapped = TorchTransformerNMT(config).train()
    return {
        "ours (sdpa)": adam_steps(ours, ours.parameters(), batches),
        "ours (manual attention)": adam_steps(manual, manual.parameters(), batches),
        "HF Marian": adam_steps(
            lambda src, tgt: marian_logits(marian, src, tgt), marian.parameters(), batches
        ),
        "nn.Transformer": adam_steps(wrapped, wrapped.parameters(), batches),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), default=["small", "base"])
    parser.add_argument("--batches", type=int, default=2, help="batches per timed call (2)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument("--min-run-time", type=float, default=10.0, help="seconds per competitor")
    parser.add_argument(
        "--keep-freed-host-memory", action="store_true", help="glibc tuned as train.py tunes it"
    )
    parser.add_argument("--quick", action="store_true", help="small size, one batch, 1 s each")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.batches, args.min_run_time = ["small"], 1, 1.0
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.keep_freed_host_memory:
        from transformer_nmt.host_memory import keep_freed_memory

        keep_freed_memory()
    rows = []
    for size in args.sizes:
        batches = token_bucket_batches(size, MAX_TOKENS, args.batches)
        tokens = sum(int((b["labels"] != PAD).sum()) for b in batches)
        medians = {}
        for name, run in competitors(size, batches).items():
            run()  # warm-up: Adam's state, the allocator
            medians[name] = median_s(run, args.min_run_time)
            print(f"  {size} {name}: {medians[name] * 1e3:.0f} ms", file=sys.stderr)
        reference = medians["ours (sdpa)"]
        for name, seconds in medians.items():
            ratio = f"**{seconds / reference:.2f}**"
            rows.append([size, name, f"{seconds * 1e3:.0f}", f"{tokens / seconds:,.0f}", ratio])
    print_table(
        f"Training step, {args.batches} batch(es) of ≤ {MAX_TOKENS} tokens a side",
        ["size", "competitor", "median ms", "target tokens/s", "time ÷ ours (sdpa)"],
        rows,
    )


if __name__ == "__main__":
    main()
