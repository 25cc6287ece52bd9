"""The loss: plain (logits, then the loss) vs fused (``training/fused_loss.py``), time and memory.

    python benchmarks/bench_loss.py [--parts head step] [--tokens 4096 25000]
        [--vocab 8000 37000] [--chunk 1024] [--repeats 3] [--threads 2] [--no-memory]

``head``: forward + backward of the loss head alone: hidden [N, d] and the tied weight [V, d]
both require grad, ε = 0.1, float32, no padding. d is 256 at V = 8000 (the Multi30k model) and
512 at V = 37000 (the paper's base).
*plain* is ``F.linear`` then ``label_smoothed_loss``; *fused* is
``fused_loss`` with chunks of ``--chunk`` rows.

``step``: one whole training step (forward, loss, backward, Adam) of the Multi30k-size model
(post-norm, d_model 256, 4 heads, 3 + 3 layers, d_ff 1024, dropout 0.1, shared embeddings) with
a vocabulary of V types, on one batch of N target tokens (sentences of 8 to 24 tokens, 5 %
padding); plain: ``model(...)`` then the loss; fused: ``model.forward_hidden(...)`` then the
fused loss.

Time: the two run interleaved in this process (``timing.interleaved``, glibc's malloc tuned as
``train.py`` tunes it), median of ``--repeats`` rounds. Memory: each variant once more in a
fresh process (one thread, glibc returning every block over 128 KiB to the system when it is
freed), after a small warm-up call: the peak PSS of that process during one full-size call, and
that peak less the PSS before the call. A plain variant whose [N, V] tensors would not fit in
60 % of the available memory is skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from competitors import our_config  # noqa: E402
from timing import (  # noqa: E402
    PeakPss,
    apply_machine_options,
    benchmark_parser,
    dump_json,
    interleaved,
    load_average,
    print_header,
)

from transformer_nmt.model import Transformer  # noqa: E402
from transformer_nmt.training.fused_loss import fused_loss  # noqa: E402
from transformer_nmt.training.loss import label_smoothed_loss  # noqa: E402

PAD, EPSILON = 0, 0.1
HEAD_WIDTH = {8000: 256, 37000: 512}  # d_model of the models with these vocabularies
PLAIN_PEAK_IN_LOGITS = 3.25  # the plain head's peak in [N, V] float32 tensors (3.0 measured)


def head_call(variant: str, n_tokens: int, vocab: int, chunk: int, seed: int = 0) -> Callable:
    """One forward + backward of the loss head alone; gradients dropped afterwards."""
    d_model = HEAD_WIDTH.get(vocab, 512)
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n_tokens, d_model, generator=generator).requires_grad_()
    bound = (6.0 / (vocab + d_model)) ** 0.5 * d_model**0.5  # Xavier, logits of std ~1
    weight = ((torch.rand(vocab, d_model, generator=generator) * 2 - 1) * bound).requires_grad_()
    labels = torch.randint(1, vocab, (n_tokens,), generator=generator)

    def run() -> None:
        if variant == "plain":
            losses = label_smoothed_loss(F.linear(hidden, weight), labels, PAD, EPSILON)
        else:
            losses = fused_loss(hidden, weight, labels, PAD, EPSILON, chunk)
        losses.loss_sum.backward()
        hidden.grad = weight.grad = None

    return run


def step_batch(n_tokens: int, vocab: int, seed: int = 0) -> dict:
    """Sentences of 8 to 24 tokens, N target tokens in all, bucketed by length as the data
    module does (so about 5 % of the cells are padding)."""
    generator = torch.Generator().manual_seed(seed)
    lengths = []
    while sum(lengths) < n_tokens:
        lengths.append(
            min(int(torch.randint(8, 25, (1,), generator=generator)), n_tokens - sum(lengths))
        )
    lengths.sort()
    rows, width = len(lengths), max(lengths)
    ids = torch.randint(3, vocab, (rows, width + 1), generator=generator)
    keep = torch.arange(width + 1) < torch.tensor(lengths)[:, None] + 1
    ids = ids.masked_fill(~keep, PAD)
    return {"src_ids": ids[:, 1:], "tgt_in_ids": ids[:, :-1], "labels": ids[:, 1:]}


def step_call(variant: str, n_tokens: int, vocab: int, chunk: int, seed: int = 0) -> Callable:
    """One Adam training step of the Multi30k-size model with ``vocab`` types on N tokens."""
    torch.manual_seed(seed)
    model = Transformer(our_config("small", vocab_size=vocab)).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    batch = step_batch(n_tokens, vocab, seed)

    def run() -> None:
        if variant == "plain":
            logits = model(batch["src_ids"], batch["tgt_in_ids"])
            losses = label_smoothed_loss(logits, batch["labels"], PAD, EPSILON)
        else:
            hidden = model.forward_hidden(batch["src_ids"], batch["tgt_in_ids"])
            losses = fused_loss(
                hidden, model.output_projection.weight, batch["labels"], PAD, EPSILON, chunk
            )
        loss, _ = losses.means()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return run


CALLS = {"head": head_call, "step": step_call}


def plain_fits(n_tokens: int, vocab: int) -> bool:
    """Whether the plain path's [N, V] tensors fit in 60 % of the memory available now."""
    with open("/proc/meminfo") as meminfo:
        available = next(int(line.split()[1]) for line in meminfo if "MemAvailable" in line)
    return PLAIN_PEAK_IN_LOGITS * n_tokens * vocab * 4 <= 0.6 * available * 1024


def peak_in_subprocess(part: str, variant: str, n_tokens: int, vocab: int, chunk: int) -> dict:
    """Peak PSS (and its growth during the call) of one call in a fresh process, MiB."""
    command = [sys.executable, __file__, "--memory-of", part, variant, str(n_tokens), str(vocab)]
    environment = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        MALLOC_MMAP_THRESHOLD_=str(128 * 1024),  # fixed: freed blocks go back to the system
        MALLOC_TRIM_THRESHOLD_=str(128 * 1024),
    )
    done = subprocess.run(
        [*command, "--chunk", str(chunk)], capture_output=True, text=True, env=environment
    )
    if done.returncode != 0:
        print(f"# memory of {part} {variant} failed: {done.stderr[-500:]}", file=sys.stderr)
        return {"peak_mib": float("nan"), "call_mib": float("nan")}
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_memory(part: str, variant: str, n_tokens: int, vocab: int, chunk: int) -> None:
    """(the memory subprocess) Warm up on 64 tokens, then one full call under PeakPss."""
    torch.set_num_threads(1)
    CALLS[part](variant, 64, vocab, chunk, seed=1)()
    call = CALLS[part](variant, n_tokens, vocab, chunk)
    with PeakPss() as pss:
        call()
    print(json.dumps({"peak_mib": pss.peak_mib, "call_mib": pss.peak_mib - pss.start_mib}))


def main() -> None:
    parser = benchmark_parser(__doc__, repeats=3, data_dir=False)
    parser.add_argument("--parts", nargs="+", choices=list(CALLS), default=["head", "step"])
    parser.add_argument("--tokens", type=int, nargs="+", default=[4096, 25000])
    parser.add_argument("--vocab", type=int, nargs="+", default=[8000, 37000])
    parser.add_argument("--chunk", type=int, default=1024, help="fused rows per chunk (1024)")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory runs")
    parser.add_argument("--memory-of", nargs=4, help=argparse.SUPPRESS)  # the memory child
    args = parser.parse_args()
    if args.memory_of:
        part, variant, n_tokens, vocab = args.memory_of
        measure_memory(part, variant, int(n_tokens), int(vocab), args.chunk)
        return
    args.tune_malloc = True  # as train.py
    malloc_tuned = apply_machine_options(args)
    machine = print_header("The loss: plain vs fused", malloc_tuned)
    tables, rows = {}, []
    for part in args.parts:
        for vocab in args.vocab:
            for n_tokens in args.tokens:
                variants = ["plain", "fused"] if plain_fits(n_tokens, vocab) else ["fused"]
                title = f"{part}, N={n_tokens}, V={vocab}"
                print(f"# {title} (load {load_average()})", file=sys.stderr)
                calls = {v: CALLS[part](v, n_tokens, vocab, args.chunk) for v in variants}
                results = interleaved(calls, repeats=args.repeats, warmup=args.warmup)
                del calls
                for variant, result in results.items():
                    result.tokens = n_tokens
                    memory = (
                        {}
                        if args.no_memory
                        else peak_in_subprocess(part, variant, n_tokens, vocab, args.chunk)
                    )
                    result.peak_mib = memory.get("peak_mib")
                    rows.append((part, n_tokens, vocab, variant, result, memory))
                tables[title] = results
    print_loss_table(rows, args)
    print(f"\n# load average at the end: {load_average()}")
    dump_json(args.json, machine, tables)


def print_loss_table(rows: list, args) -> None:
    print(
        f"\n## plain vs fused (chunk {args.chunk}), {torch.get_num_threads()} thread(s), "
        f"median of {args.repeats}"
    )
    print(
        "| part | N | V | loss | median ms | min–max ms | ÷ plain | peak PSS MiB | "
        "of which the call |"
    )
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|")
    plain_ms: dict[tuple, float] = {}
    for part, n_tokens, vocab, variant, result, memory in rows:
        key = (part, n_tokens, vocab)
        if variant == "plain":
            plain_ms[key] = result.median_s
        ratio = f"**{result.median_s / plain_ms[key]:.2f}**" if key in plain_ms else "–"
        fastest, slowest = result.spread
        peak, call = (
            "–" if memory.get(field) is None else f"{memory[field]:.0f}"
            for field in ("peak_mib", "call_mib")
        )
        print(
            f"| {part} | {n_tokens} | {vocab} | {variant} | {result.median_s * 1e3:.0f} "
            f"| {fastest * 1e3:.0f}–{slowest * 1e3:.0f} | {ratio} | {peak} | {call} |"
        )
    if any(variant == "fused" and (part, n, v) not in plain_ms for part, n, v, variant, *_ in rows):
        print("(–: plain skipped, its [N, V] tensors would not fit in memory)")


if __name__ == "__main__":
    main()
