"""The loss: plain (logits, then the loss) against fused (a chunk of tokens at a time), time and
memory.

    python benchmarks/bench_loss.py [--parts head step] [--tokens 4096 25000]
        [--vocab 8000 37000] [--threads 2] [--quick]

``head``: forward + backward of the loss head alone (hidden [N, d] and the tied weight [V, d],
ε = 0.1, float32; d = 128 at V = 8000, 512 otherwise). ``step``: a whole Adam step of the
Multi30k-size model (``workload.SIZES["small"]``) with a V-type vocabulary on a token-bucket
batch of about N target tokens. Plain: the logits, then ``label_smoothed_loss``; fused:
``forward_hidden``, then ``fused_loss``.

Time: median of repeated calls (``Timer.blocked_autorange``), glibc's malloc tuned as
``train.py`` tunes it. Memory: each row again in a fresh one-thread process, after a small
warm-up call: the rise of its PSS during one full-size call. A plain row whose [N, V] tensors
would not fit in 60 % of the available memory is skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import PeakTreePss, median_s, print_table  # noqa: E402
from workload import PAD, our_config, token_bucket_batches  # noqa: E402

from transformer_nmt.model import Transformer  # noqa: E402
from transformer_nmt.training.fused_loss import fused_loss  # noqa: E402
from transformer_nmt.training.loss import label_smoothed_loss  # noqa: E402

EPSILON = 0.1


def output_weight(model: Transformer) -> torch.Tensor:
    """The pre-softmax linear's weight (tied to the target embedding)."""
    return model.output_projection.weight


def loss(variant: str, hidden, weight, labels):
    if variant == "plain":
        return label_smoothed_loss(F.linear(hidden, weight), labels, PAD, EPSILON)
    return fused_loss(hidden, weight, labels, PAD, EPSILON)


def head_call(variant: str, n_tokens: int, vocab: int):
    """One forward + backward of the loss head alone."""
    d_model = 128 if vocab == 8000 else 512
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(n_tokens, d_model, generator=generator).requires_grad_()
    bound = (6.0 / (vocab + d_model)) ** 0.5 * d_model**0.5  # Xavier × √d: logits of std ~1
    weight = ((torch.rand(vocab, d_model, generator=generator) * 2 - 1) * bound).requires_grad_()
    labels = torch.randint(1, vocab, (n_tokens,), generator=generator)

    def run() -> None:
        loss(variant, hidden, weight, labels).loss_sum.backward()
        hidden.grad = weight.grad = None

    return run


def step_call(variant: str, n_tokens: int, vocab: int):
    """One Adam step of the Multi30k-size model with ``vocab`` types on ~N target tokens."""
    torch.manual_seed(0)
    model = Transformer(our_config("small", src_vocab_size=vocab, tgt_vocab_size=vocab)).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    batch = token_bucket_batches("small", int(n_tokens * 1.1), 1)[0]

    def run() -> None:
        hidden = model.forward_hidden(batch["src_ids"], batch["tgt_in_ids"])
        losses = loss(variant, hidden, output_weight(model), batch["labels"])
        optimizer.zero_grad(set_to_none=True)
        losses.means()[0].backward()
        optimizer.step()

    return run


CALLS = {"head": head_call, "step": step_call}


def plain_fits(n_tokens: int, vocab: int) -> bool:
    """Whether the plain path's ~3 [N, V] float32 tensors fit in 60 % of the available memory."""
    return 3.25 * n_tokens * vocab * 4 <= 0.6 * psutil.virtual_memory().available


def memory_in_fresh_process(part: str, variant: str, n_tokens: int, vocab: int) -> float:
    """MiB the PSS of a fresh one-thread process rises by during one call."""
    command = [sys.executable, __file__, "--memory-of", part, variant, str(n_tokens), str(vocab)]
    # every freed block goes back to the system: the rise is what the call itself needs
    small = str(128 * 1024)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=small, MALLOC_TRIM_THRESHOLD_=small)
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        print(f"# memory of {part} {variant} failed: {done.stderr[-500:]}", file=sys.stderr)
        return float("nan")
    return json.loads(done.stdout.splitlines()[-1])


def measure_memory(part: str, variant: str, n_tokens: int, vocab: int) -> None:
    """(the fresh process) warm up on 64 tokens, then one full call under PeakTreePss."""
    torch.set_num_threads(1)
    CALLS[part](variant, 64, vocab)()
    call = CALLS[part](variant, n_tokens, vocab)
    with PeakTreePss(interval=0.01) as pss:
        call()
    print(json.dumps((pss.peak - pss.start) / 2**20))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", nargs="+", choices=list(CALLS), default=["head", "step"])
    parser.add_argument("--tokens", type=int, nargs="+", default=[4096, 25000])
    parser.add_argument("--vocab", type=int, nargs="+", default=[8000, 37000])
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument("--min-run-time", type=float, default=5.0, help="seconds per row")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory processes")
    parser.add_argument("--quick", action="store_true", help="4096 tokens, 8000 types, 1 s a row")
    parser.add_argument("--memory-of", nargs=4, help=argparse.SUPPRESS)  # the fresh process
    args = parser.parse_args()
    if args.memory_of:
        part, variant, n_tokens, vocab = args.memory_of
        return measure_memory(part, variant, int(n_tokens), int(vocab))
    if args.quick:
        args.tokens, args.vocab, args.min_run_time = [4096], [8000], 1.0
    if args.threads:
        torch.set_num_threads(args.threads)
    from transformer_nmt.host_memory import keep_freed_memory

    keep_freed_memory()  # as train.py does by default
    rows = []
    for part in args.parts:
        for vocab in args.vocab:
            for n_tokens in args.tokens:
                plain_ms = None
                for variant in ("plain", "fused") if plain_fits(n_tokens, vocab) else ("fused",):
                    call = CALLS[part](variant, n_tokens, vocab)
                    call()
                    ms = median_s(call, args.min_run_time) * 1e3
                    del call
                    plain_ms = ms if variant == "plain" else plain_ms
                    ratio = f"**{ms / plain_ms:.2f}**" if plain_ms else "– (plain: no room)"
                    memory = "–"
                    if not args.no_memory:
                        mib = memory_in_fresh_process(part, variant, n_tokens, vocab)
                        memory = f"{mib:.0f}"
                    rows.append([part, n_tokens, vocab, variant, f"{ms:.0f}", ratio, memory])
                    print(f"  {rows[-1]}", file=sys.stderr)
    print_table(
        "The loss: plain vs fused",
        ["part", "N tokens", "V", "loss", "median ms", "time ÷ plain", "call's PSS rise MiB"],
        rows,
    )


if __name__ == "__main__":
    main()
