"""The paper's base model training in bf16 on one GPU: target tokens/s and model FLOPs utilisation.

    python benchmarks/bench_gpu.py [--variants eager,compile,...] [--batches 8] [--repeats 5]
        [--profile VARIANT] [--train-py]
    python benchmarks/bench_gpu.py --batches 40 --warmup 0 --repeats 1   # a new shape every step
    python benchmarks/bench_gpu.py --quick   # the small model on the CPU: checks the script

**The bare step** (every variant): the base model (``workload.SIZES["base"]``) takes
``train.py trainer=gpu``'s optimizer step, written out: forward and loss under bf16 autocast,
backward of the token-mean loss, one host read of loss and gradient norm (the non-finite check),
clipping at 1.0, Adam, the Noam schedule; on ``--batches`` token buckets of ≤ ``--max-tokens``
padded tokens a side (the paper's 25,000) with WMT-like lengths, cycled: after ``--warmup``
passes every shape has been seen. Times are medians of ``--repeats`` passes.

**MFU** = model FLOPs per second / the device's bf16 peak (Lightning's
``get_available_flops``; ``--peak-tflops`` overrides it). Model FLOPs: the matrix products of the
real tokens (padding excluded; the decoder's self-attention over its causal half), backward twice
forward (:func:`training_flops`, checked against ``torch.utils.flop_counter`` by
``tests/benchmarks/test_model_flops.py``).

**train.py** (``--train-py``): ``python train.py trainer=gpu`` itself, on a synthetic corpus
(``bench_data_pipeline.write_corpus``, its own 37,000-type BPE), ``--train-steps`` steps of one
``--max-tokens`` batch, timed from step 10 by a callback counting the same model FLOPs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from lightning.fabric.utilities.throughput import get_available_flops
from lightning.pytorch.callbacks import Callback

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import print_table  # noqa: E402
from workload import PAD, our_config, token_bucket_batches  # noqa: E402

from transformer_nmt.model import Transformer, TransformerConfig  # noqa: E402
from transformer_nmt.training.fused_loss import fused_loss  # noqa: E402
from transformer_nmt.training.loss import label_smoothed_loss  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
# name: (fused loss, Adam(fused=True), torch.compile, host read per step, attention)
VARIANTS = {
    "eager": (True, False, False, True, "sdpa"),  # what trainer=gpu runs
    "plain_loss": (False, False, False, True, "sdpa"),  # fused_loss=false
    "fused_adam": (True, True, False, True, "sdpa"),
    "compile": (True, True, True, True, "sdpa"),  # compile=true
    "compile_plain_loss": (False, True, True, True, "sdpa"),
    "compile_no_host_read": (True, True, True, False, "sdpa"),
    "manual_attention": (True, False, False, True, "manual"),  # model.attention=manual
}


def training_flops(config: TransformerConfig, src_lengths, tgt_lengths) -> float:
    """Model FLOPs of one training step (3 forwards) on sentences of these real lengths (source
    with EOS, target with BOS): matrix products only, padding excluded."""
    src = np.asarray(src_lengths, dtype=np.float64)
    tgt = np.asarray(tgt_lengths, dtype=np.float64)
    d, d_ff = config.d_model, config.d_ff
    hk, hv = config.n_heads * config.d_k, config.n_heads * config.d_v  # widths of all heads
    s_tokens, t_tokens = src.sum(), tgt.sum()
    projections = 2 * d * (2 * hk + hv) + 2 * hv * d  # W^Q, W^K, W^V, W^O per token
    feed_forward = 4 * d * d_ff
    encoder = s_tokens * (projections + feed_forward) + 2 * (src * src).sum() * (hk + hv)
    decoder = (
        t_tokens * (projections + feed_forward)
        + 2 * (tgt * (tgt + 1) / 2).sum() * (hk + hv)  # causal self-attention: QKᵀ and AV
        + t_tokens * (2 * d * hk + 2 * hv * d)  # cross-attention W^Q, W^O
        + s_tokens * 2 * d * (hk + hv)  # cross-attention W^K, W^V over the memory
        + 2 * (tgt * src).sum() * (hk + hv)  # cross-attention QKᵀ and AV
    )
    output_layer = t_tokens * 2 * d * config.tgt_vocab_size
    return 3.0 * (
        config.n_encoder_layers * encoder + config.n_decoder_layers * decoder + output_layer
    )


def bare_step(config: TransformerConfig, variant: str, device: torch.device):
    """A function taking train.py's optimizer step on one batch, as ``variant`` configures it."""
    use_fused_loss, fused_adam, compiled, host_read, attention = VARIANTS[variant]
    torch.manual_seed(0)
    model = Transformer(dataclasses.replace(config, attention=attention)).to(device).train()
    forward = model.forward_hidden if use_fused_loss else model.forward
    forward = torch.compile(forward) if compiled else forward
    parameters = list(model.parameters())
    optimizer = torch.optim.Adam(
        parameters, lr=1.0, betas=(0.9, 0.98), eps=1e-9, fused=fused_adam or None
    )
    d, warmup = config.d_model, 4000  # Noam: d^-0.5 · min(s^-0.5, s · warmup^-1.5)
    noam = lambda step: d**-0.5 * min((step + 1) ** -0.5, (step + 1) * warmup**-1.5)  # noqa: E731
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, noam)

    def step(batch: dict) -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            outputs = forward(batch["src_ids"], batch["tgt_in_ids"])
            if use_fused_loss:  # the output layer's weight is the Parameter itself: tied gradients
                weight = model.output_projection.weight
                losses = fused_loss(outputs, weight, batch["labels"], PAD, 0.1)
            else:
                losses = label_smoothed_loss(outputs, batch["labels"], PAD, 0.1)
        losses.means()[0].backward()
        norm = torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        if host_read:  # train.py's one wait for the device per step
            loss, norm = torch.stack([losses.loss_sum, norm]).tolist()
            if not (np.isfinite(loss) and np.isfinite(norm)):
                raise RuntimeError("non-finite loss or gradient")
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()

    return step


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_variant(variant, config, batches, device, args) -> tuple[float, float, float, str]:
    """(ms a step, target tokens/s, model FLOP/s, peak GiB) of the bare step of ``variant``."""
    step = bare_step(config, variant, device)
    on_device = [{k: v.to(device) for k, v in b.items() if torch.is_tensor(v)} for b in batches]
    flops = sum(training_flops(config, b["src_lengths"], b["tgt_lengths"]) for b in batches)
    tokens = sum(int(b["tgt_lengths"].sum()) for b in batches)
    for _ in range(args.warmup):  # every shape once: compilation happens here
        for batch in on_device:
            step(batch)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seconds = []
    for _ in range(args.repeats):
        synchronize(device)
        start = time.perf_counter()
        for batch in on_device:
            step(batch)
        synchronize(device)
        seconds.append(time.perf_counter() - start)
    median = float(np.median(seconds))
    peak = (
        f"{torch.cuda.max_memory_allocated(device) / 2**30:.1f}" if device.type == "cuda" else "–"
    )
    return median / len(batches) * 1e3, tokens / median, flops / median, peak


class FlopsTimer(Callback):
    """Added to train.py on the command line: seconds, target tokens and model FLOPs from
    optimizer step ``warmup_steps`` + 1 to the end, written to ``out`` as JSON."""

    def __init__(self, out: str, warmup_steps: int) -> None:
        self.out, self.warmup_steps = out, warmup_steps
        self.start, self.end, self.tokens, self.flops, self.steps = None, 0.0, 0, 0.0, 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.start is None and trainer.global_step == self.warmup_steps:
            synchronize(pl_module.device)
            self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.start is None:
            return
        pad = trainer.datamodule.pad_id
        src = (batch["src_ids"] != pad).sum(dim=1).cpu().numpy()
        tgt = (batch["labels"] != pad).sum(dim=1).cpu().numpy()
        self.flops += training_flops(pl_module.model.config, src, tgt)
        self.tokens, self.steps = self.tokens + int(tgt.sum()), self.steps + 1
        synchronize(pl_module.device)
        self.end = time.perf_counter()

    def on_train_end(self, trainer, pl_module) -> None:
        seconds = self.end - self.start
        Path(self.out).write_text(json.dumps([seconds, self.tokens, self.flops, self.steps]))


def train_py(args, work: Path, extra: list[str]) -> tuple[float, float, float, str]:
    """(ms a step, target tokens/s, model FLOP/s, "–") of ``train.py trainer=gpu`` + ``extra``."""
    from bench_data_pipeline import write_corpus

    corpus = work / "corpus"
    if not corpus.is_dir():
        write_corpus(corpus, 50_000)
    out = work / "timer.json"
    on_gpu = args.device.startswith("cuda")
    overrides = [
        "trainer=gpu" if on_gpu else "trainer=cpu",
        "data=wmt16_files",
        *(f"data.data_files.{s}={corpus / s}.jsonl" for s in ("train", "validation", "test")),
        f"data.cache_dir={work / 'cache'}",
        f"data.max_tokens={args.max_tokens}",
        "trainer.accumulate_grad_batches=1",
        f"trainer.max_steps={args.train_steps}",
        "trainer.limit_val_batches=0",
        "trainer.num_sanity_val_steps=0",
        "trainer.enable_progress_bar=false",
        "final_eval.splits=[]",
        "optimized_metric=null",
        "logger=none",
        f"hydra.run.dir={work / 'run'}",
        "+callbacks.timer._target_=bench_gpu.FlopsTimer",
        f"+callbacks.timer.out={out}",
        "+callbacks.timer.warmup_steps=10",
        *args.model_overrides,
        *extra,
    ]
    path = os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "train.py"), *overrides],
        text=True,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": path},
    )
    if done.returncode != 0:
        raise SystemExit(f"train.py failed:\n{done.stderr[-5000:]}")
    seconds, tokens, flops, steps = json.loads(out.read_text())
    return seconds / steps * 1e3, tokens / seconds, flops / seconds, "–"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--max-tokens", type=int, default=25000, help="padded tokens a side")
    parser.add_argument("--batches", type=int, default=8, help="distinct batches, cycled")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes over the batches")
    parser.add_argument("--warmup", type=int, default=2, help="untimed passes (compilation)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--peak-tflops", type=float, default=None, help="the device's bf16 peak")
    parser.add_argument("--profile", choices=list(VARIANTS), help="print a variant's kernels")
    parser.add_argument("--train-py", action="store_true", help="also time train.py trainer=gpu")
    parser.add_argument("--train-steps", type=int, default=60)
    parser.add_argument("--quick", action="store_true", help="a 2-layer model on the CPU")
    args = parser.parse_args()
    size, args.model_overrides = "base", []
    if args.quick:
        args.device, args.max_tokens, args.batches, args.repeats, args.warmup = "cpu", 512, 2, 1, 1
        args.variants, args.train_steps = "eager,plain_loss", 12
        args.model_overrides = ["model=tiny", "trainer.precision=bf16-mixed"]
        size = "small"
    device = torch.device(args.device)
    config = our_config(size, **({"n_layers": 2} if args.quick else {}))
    peak = (
        args.peak_tflops * 1e12 if args.peak_tflops else get_available_flops(device, torch.bfloat16)
    )
    batches = token_bucket_batches(size, args.max_tokens, args.batches)
    results = {}
    for variant in args.variants.split(","):
        results[variant] = time_variant(variant, config, batches, device, args)
        print(f"  {variant}: {results[variant][0]:.1f} ms/step", file=sys.stderr)
    if args.train_py:
        with tempfile.TemporaryDirectory(prefix="bench_gpu_") as work:
            results["train.py"] = train_py(args, Path(work), [])
    rows = []
    for name, (ms, tokens_per_s, flops_per_s, peak_gib) in results.items():
        mfu = f"**{flops_per_s / peak:.1%}**" if peak else "–"
        rows.append(
            [name, f"{ms:.1f}", f"{tokens_per_s:,.0f}", f"{flops_per_s / 1e12:.3g}", mfu, peak_gib]
        )
    sentences = np.mean([len(b["src_lengths"]) for b in batches])
    print_table(
        f"{size} model, bf16, {len(batches)} batches of ≤ {args.max_tokens} tokens a side "
        f"({sentences:.0f} sentences on average); bf16 peak {peak / 1e12 if peak else '?'} TFLOP/s",
        ["variant", "ms/step", "target tokens/s", "model TFLOP/s", "MFU", "peak GiB"],
        rows,
    )
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        step = bare_step(config, args.profile, device)
        on_device = [{k: v.to(device) for k, v in b.items() if torch.is_tensor(v)} for b in batches]
        for batch in on_device * 2:  # warm-up
            step(batch)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
            for batch in on_device:
                step(batch)
            synchronize(device)
        print(profiler.key_averages().table(sort_by="self_device_time_total", row_limit=30))


if __name__ == "__main__":
    main()
