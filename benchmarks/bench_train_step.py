"""Training step (forward + backward + Adam step) of our Transformer vs HF Marian vs nn.Transformer.

    python benchmarks/bench_train_step.py [--sizes small base] [--repeats 5] [--json out.json]
    python benchmarks/bench_train_step.py --sizes small --profile   # per-op CPU time of each

For each size (small = the Multi30k model, base = the paper's), every competitor is built with
the same shape, post-norm, dropout 0.1, one vocabulary shared by the embeddings and the output
projection, and trains on the same batches: Multi30k token buckets (``--max-tokens`` padded
tokens per side per batch) from the data module, with a temporary cache. One timed call is one
training step on each of ``--batches`` batches: forward, label-smoothed cross-entropy
(ε = 0.1, the same function for everyone), backward, Adam step. The competitors run interleaved
(see ``timing.py``); tokens/s counts target (non-pad) tokens. Peak MiB is the resident memory
a call adds at its peak.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from competitors import (  # noqa: E402
    SIZES,
    TorchTransformerNMT,
    build_marian,
    num_parameters,
    our_config,
)
from timing import (  # noqa: E402
    # noqa: E402
    DEFAULT_MULTI30K,
    dump_json,
    interleaved,
    load_average,
    multi30k,
    peak_memory_mib,
    print_header,
    print_table,
    script_parser,
    tune_malloc,
)

from transformer_nmt.export.huggingface import hf_logits  # noqa: E402
from transformer_nmt.model import Transformer  # noqa: E402

PAD = 0
DEFAULT_BATCHES = {"small": 4, "base": 1}  # a call takes a few seconds either way


def multi30k_batches(data_dir: str, max_tokens: int, count: int, seed: int) -> list[dict]:
    """``count`` token-bucket training batches of Multi30k (8k joint BPE), the data module's way.

    Takes batches whose size is near the median, so that a few batches stand for an epoch.
    """
    with multi30k(data_dir, max_tokens, seed) as dm:
        batches = list(dm.train_dataloader())
    batches.sort(key=lambda b: b["tgt_in_ids"].numel())
    middle = len(batches) // 2
    return batches[middle - count // 2 : middle - count // 2 + count]


def target_tokens(batches: list[dict]) -> int:
    return sum(int((b["labels"] != PAD).sum()) for b in batches)


def training_step(forward, parameters, batches: list[dict], vocab: int):
    """A function that runs one Adam step on each batch."""
    optimizer = torch.optim.Adam(parameters, lr=1e-4, betas=(0.9, 0.98), eps=1e-9)

    def run() -> None:
        for batch in batches:
            logits = forward(batch["src_ids"], batch["tgt_in_ids"])
            loss = F.cross_entropy(
                logits.reshape(-1, vocab),
                batch["labels"].reshape(-1),
                ignore_index=PAD,
                label_smoothing=0.1,
            )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

    return run


def competitors(size: str, args: argparse.Namespace, batches: list[dict]) -> dict:
    torch.manual_seed(args.seed)
    config = our_config(size)
    vocab = config.tgt_vocab_size
    ours_manual = Transformer(config).train()
    ours_sdpa = Transformer(dataclasses.replace(config, attention="sdpa")).train()
    ours_sdpa.load_state_dict(ours_manual.state_dict())
    marian = build_marian(config).train()
    torch_nmt = TorchTransformerNMT(config).train()
    print(
        f"# {size}: parameters ours {ours_manual.num_parameters():,}, Marian "
        f"{num_parameters(marian):,}, nn.Transformer {num_parameters(torch_nmt):,} "
        f"(+2 final LayerNorms); vocab {vocab}"
    )
    runs = {
        "ours (sdpa)": training_step(ours_sdpa, ours_sdpa.parameters(), batches, vocab),
        "ours (manual)": training_step(ours_manual, ours_manual.parameters(), batches, vocab),
        "HF Marian (sdpa)": training_step(
            lambda s, t: hf_logits(marian, s, t, PAD), marian.parameters(), batches, vocab
        ),
        "nn.Transformer": training_step(torch_nmt, torch_nmt.parameters(), batches, vocab),
    }
    if args.compile:
        ours_compiled = Transformer(dataclasses.replace(config, attention="sdpa")).train()
        ours_compiled.load_state_dict(ours_manual.state_dict())
        runs["ours (sdpa, compiled)"] = training_step(
            torch.compile(ours_compiled), ours_compiled.parameters(), batches, vocab
        )
    return runs


def profile_competitors(runs: dict, rows: int) -> None:
    """Self CPU time per operator of one call of each competitor (after a warm-up call),
    the operators ranked by the first competitor's time."""
    from torch.profiler import ProfilerActivity, profile

    per_op: dict[str, dict[str, float]] = {}
    totals: dict[str, float] = {}
    for name, run in runs.items():
        run()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            run()
        events = prof.key_averages()
        per_op[name] = {e.key: e.self_cpu_time_total / 1e3 for e in events}
        totals[name] = sum(per_op[name].values())
    names = list(runs)
    first = per_op[names[0]]
    ranked = sorted(first, key=first.get, reverse=True)[:rows]
    print("\n## self CPU ms per operator, one call (profiler overhead included)")
    print("| operator | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for op in ranked:
        cells = " | ".join(f"{per_op[n].get(op, 0.0):.0f}" for n in names)
        print(f"| `{op[:60]}` | {cells} |")
    print("| **total** | " + " | ".join(f"**{totals[n]:.0f}**" for n in names) + " |")


def main() -> None:
    parser = script_parser(__doc__)
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), default=["small", "base"])
    parser.add_argument(
        "--data-dir",
        default=DEFAULT_MULTI30K,
        help="Multi30k (default: $MULTI30K_DIR, else data/multi30k)",
    )
    parser.add_argument(
        "--max-tokens", type=int, default=2048, help="padded tokens per side per batch (2048)"
    )
    parser.add_argument(
        "--batches",
        type=int,
        default=None,
        help=f"batches per timed call (default: {DEFAULT_BATCHES} by size)",
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds (default 1)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument(
        "--tune-malloc", action="store_true", help="keep large blocks in glibc's heap (all alike)"
    )
    parser.add_argument("--compile", action="store_true", help="add ours under torch.compile")
    parser.add_argument(
        "--profile", action="store_true", help="instead of timing, profile one call of each"
    )
    parser.add_argument("--profile-rows", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    malloc_tuned = tune_malloc() if args.tune_malloc else False

    machine = print_header("Training step: ours vs HF Marian vs nn.Transformer", malloc_tuned)
    tables = {}
    for size in args.sizes:
        max_tokens = args.max_tokens
        count = args.batches or DEFAULT_BATCHES[size]
        batches = multi30k_batches(args.data_dir, max_tokens, count, args.seed)
        shapes = ", ".join(f"{tuple(b['tgt_in_ids'].shape)}" for b in batches)
        runs = competitors(size, args, batches)
        if args.profile:
            print(f"# {size}: [B, T] = {shapes}")
            profile_competitors(runs, args.profile_rows)
            continue
        print(f"# {size}: {count} batch(es) of ≤{max_tokens} tokens per side, [B, T] = {shapes}")
        results = interleaved(runs, repeats=args.repeats, warmup=args.warmup)
        tokens = target_tokens(batches)
        for name, run in runs.items():
            results[name].tokens = tokens
            results[name].peak_mib = peak_memory_mib(run)
        title = f"{size}: d_model {SIZES[size]['d_model']}, {count} step(s) per call"
        print_table(results, reference="ours (sdpa)", title=title)
        tables[title] = results
    print(f"\n# load average at the end: {load_average()}")
    dump_json(args.json, machine, tables)


if __name__ == "__main__":
    main()
