"""The paper's base model training in bf16 on one GPU: target tokens/s and model FLOPs utilisation.

    python benchmarks/bench_gpu.py --train-py "" "compile=true" --profile eager,compile
    python benchmarks/bench_gpu.py --batches 40 --warmup 0 --repeats 1   # a new shape every step
    python benchmarks/bench_gpu.py --quick --train-py ""   # the small model on the CPU

**The bare step** (``--variants``): the base model (``workload.SIZES["base"]``) takes
``train.py trainer=gpu``'s optimizer step without Lightning: the module's own loss function
(compiled or not) under bf16 autocast, backward of the loss sum, the token-mean update with its
non-finite guard (on the device, or read on the host every step: ``eager_host_read``),
clipping at 1.0, Adam, the Noam schedule; on ``--batches`` token buckets of ≤ ``--max-tokens``
padded tokens a side (the paper's 25,000) with WMT-like lengths, cycled: after ``--warmup``
passes every shape has been seen. Times are medians of ``--repeats`` passes.

**MFU** = model FLOPs per second / the device's bf16 peak (Lightning's
``get_available_flops``; ``--peak-tflops`` overrides it). Model FLOPs: the matrix products of the
real tokens (padding excluded; the decoder's self-attention over its causal half), backward twice
forward (:func:`training_flops`, checked against ``torch.utils.flop_counter`` by
``tests/benchmarks/test_model_flops.py``). *padding*: padded over real tokens, both sides;
*graphs*: what ``torch.compile`` compiled.

**train.py** (``--train-py OVERRIDES ...``): ``python train.py trainer=gpu OVERRIDES`` itself,
once per argument, on a synthetic corpus (``bench_data_pipeline.write_corpus``, its own
37,000-type BPE), ``--train-steps`` steps of one ``--max-tokens`` batch, timed after
``--train-warmup`` steps by a callback counting the same model FLOPs.

**Profile** (``--profile VARIANTS``): device time per step by kernel class (:data:`KERNEL_CLASSES`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
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
from workload import BOS, EOS, PAD, our_config, token_bucket_batches  # noqa: E402

from transformer_nmt.model import TransformerConfig  # noqa: E402
from transformer_nmt.private_api import compiled_graphs  # noqa: E402
from transformer_nmt.training import TranslationModule  # noqa: E402
from transformer_nmt.training.optimizer import AdamConfig, build_adam  # noqa: E402
from transformer_nmt.training.schedules import StepSchedule, build_scheduler  # noqa: E402
from transformer_nmt.training.update import (  # noqa: E402
    NonFiniteSteps,
    TokenMeanUpdate,
    apply_update_scale,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
# name: (compile, fused_loss, fused Adam, host read per step, attention)
VARIANTS = {
    "eager": (False, True, True, False, "sdpa"),  # what trainer=gpu runs
    "eager_host_read": (False, True, False, True, "sdpa"),  # for-each Adam, a host read a step
    "plain_loss": (False, False, True, False, "sdpa"),  # fused_loss=false
    "compile": (True, True, True, False, "sdpa"),  # compile=true
    "compile_plain_loss": (True, False, True, False, "sdpa"),  # compile=true fused_loss=false
    "manual_attention": (False, True, True, False, "manual"),  # model.attention=manual
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
    """A function taking train.py's optimizer step on one batch, as ``variant`` configures it:
    the module's own (compiled) loss function, its token-mean update, non-finite guard and
    clipping at 1.0, Adam, the Noam schedule."""
    compiled, use_fused_loss, fused_adam, host_read, attention = VARIANTS[variant]
    torch.manual_seed(0)
    module = TranslationModule(
        model_config=dataclasses.replace(config, attention=attention).to_dict(),
        tokenizer_dir="", src_lang="de", tgt_lang="en", bos_id=BOS, eos_id=EOS, pad_id=PAD,
        fused_loss=use_fused_loss, compile=compiled,
    )  # fmt: skip
    module = module.to(device).train()
    parameters = list(module.parameters())
    optimizer = build_adam(parameters, AdamConfig(fused=fused_adam))
    scheduler = build_scheduler(optimizer, StepSchedule(name="noam", d_model=config.d_model))
    update, non_finite, count = TokenMeanUpdate(), NonFiniteSteps(), [0]

    def step(batch: dict) -> None:
        count[0] += 1
        with torch.autocast(device.type, dtype=torch.bfloat16):
            losses = module.batch_losses(batch)
        update.add(losses)
        losses.loss_sum.backward()
        gradients = [p.grad for p in parameters]
        totals = update.finish(gradients, reduce_sum=lambda sums: sums, backward_divisor=1)
        found_inf = non_finite.note(count[0], totals)
        if host_read:  # the check on the host, every step
            non_finite.check()
        else:
            optimizer.found_inf = found_inf
        apply_update_scale(gradients, totals, 1.0, "norm")
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()

    return step


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_variant(variant, config, batches, device, args) -> tuple[float, float, float, float]:
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
    on_gpu = device.type == "cuda"
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if on_gpu else None
    return median / len(batches) * 1e3, tokens / median, flops / median, peak


class FlopsTimer(Callback):
    """Added to train.py on the command line: seconds, target tokens, model FLOPs, padding and
    compiled graphs from optimizer step ``warmup_steps`` + 1 to the end, written to ``out`` as
    JSON. It keeps the batches' lengths on the device and reads them at the end: it adds no
    wait for the device to the steps it times."""

    def __init__(self, out: str, warmup_steps: int) -> None:
        self.out, self.warmup_steps = out, warmup_steps
        self.start, self.end, self.lengths, self.padded = None, 0.0, [], 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.start is None and trainer.global_step == self.warmup_steps:
            synchronize(pl_module.device)
            self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.start is None:
            return
        pad = trainer.datamodule.pad_id
        self.lengths.append(((batch["src_ids"] != pad).sum(1), (batch["labels"] != pad).sum(1)))
        self.padded += batch["src_ids"].numel() + batch["labels"].numel()
        if trainer.global_step == trainer.max_steps:
            synchronize(pl_module.device)
            self.end = time.perf_counter()

    def on_train_end(self, trainer, pl_module) -> None:
        config = pl_module.model.config
        flops = sum(training_flops(config, s.cpu(), t.cpu()) for s, t in self.lengths)
        tokens = sum(int(t.sum()) for _, t in self.lengths)
        real = tokens + sum(int(s.sum()) for s, _ in self.lengths)
        peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None
        result = dict(
            seconds=self.end - self.start, steps=len(self.lengths), tokens=tokens, flops=flops,
            padding=self.padded / real - 1, peak_gib=peak, graphs=compiled_graphs(),
        )  # fmt: skip
        Path(self.out).write_text(json.dumps(result))


def train_py(args, work: Path, extra: list[str]) -> dict:
    """``train.py trainer=gpu`` + ``extra``, timed by :class:`FlopsTimer`: its JSON."""
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
        f"+callbacks.timer.warmup_steps={args.train_warmup}",
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
        raise RuntimeError(f"train.py {' '.join(extra)} failed:\n{done.stderr[-5000:]}")
    return json.loads(out.read_text())


# Kernel classes of the profile table: the first pattern a kernel's name matches (lower case).
KERNEL_CLASSES = {
    "attention": r"flash|fmha|attention|sdpa",  # first: their names hold "cutlass"
    "matrix products": r"gemm|cutlass|xmma|nvjet|cublas|sm90_|addmm|\bmm\b|matmul",
    "Adam": r"adam",
    "compiled (Triton)": r"^triton",
    "LayerNorm": r"layer_norm|layernorm",
    "softmax and loss": r"softmax|nll|cross_entropy|logsumexp",
    "dropout": r"dropout|bernoulli|philox",
    "copies and casts": r"copy|cast|to_copy|cat|index",
    "sums and reductions": r"reduce|sum|norm",
    "element-wise": r"elementwise|foreach|mul|add|where|exp|fill",
}


def kernel_class(name: str) -> str:
    name = name.lower()
    return next((c for c, p in KERNEL_CLASSES.items() if re.search(p, name)), "other")


def profile_classes(config, variant: str, batches: list[dict], device) -> dict[str, float]:
    """Device time (ms a step) per kernel class of ``variant``'s bare step (CPU time of the
    operators on a CPU)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    step = bare_step(config, variant, device)
    on_device = [{k: v.to(device) for k, v in b.items() if torch.is_tensor(v)} for b in batches]
    for batch in on_device * 2:  # warm-up, compilation
        step(batch)
    synchronize(device)
    on_gpu = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as profiler:
        for batch in on_device:
            step(batch)
        synchronize(device)
    totals: dict[str, float] = {}
    for event in profiler.key_averages():
        if on_gpu and event.device_type != DeviceType.CUDA:
            continue
        if not on_gpu and not event.key.startswith("aten::"):
            continue  # operators' own (self) time only
        micros = event.self_device_time_total if on_gpu else event.self_cpu_time_total
        name = kernel_class(event.key)
        totals[name] = totals.get(name, 0.0) + micros / 1e3 / len(on_device)
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--max-tokens", type=int, default=25000, help="padded tokens a side")
    parser.add_argument("--batches", type=int, default=8, help="distinct batches, cycled")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes over the batches")
    parser.add_argument("--warmup", type=int, default=2, help="untimed passes (compilation)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--peak-tflops", type=float, default=None, help="the device's bf16 peak")
    parser.add_argument(
        "--profile", default="", help="variants whose device time per kernel class to print"
    )
    parser.add_argument(
        "--train-py", nargs="*", default=None, metavar="OVERRIDES",
        help="also time train.py trainer=gpu, once per argument (overrides, space-separated)",
    )  # fmt: skip
    parser.add_argument("--train-steps", type=int, default=60)
    parser.add_argument("--train-warmup", type=int, default=15, help="train.py steps not timed")
    parser.add_argument("--quick", action="store_true", help="a 2-layer model on the CPU")
    args = parser.parse_args()
    size, args.model_overrides = "base", []
    if args.quick:
        args.device, args.max_tokens, args.batches, args.repeats, args.warmup = "cpu", 512, 2, 1, 1
        args.variants, args.train_steps, args.train_warmup = "eager,eager_host_read", 12, 4
        args.model_overrides = ["model=tiny", "trainer.precision=bf16-mixed"]
        size = "small"
    device = torch.device(args.device)
    config = our_config(size, **({"n_layers": 2} if args.quick else {}))
    peak = (
        args.peak_tflops * 1e12 if args.peak_tflops else get_available_flops(device, torch.bfloat16)
    )
    batches = token_bucket_batches(size, args.max_tokens, args.batches)
    real = sum(int(b["src_lengths"].sum() + b["tgt_lengths"].sum()) for b in batches)
    padding = sum(b["src_ids"].numel() + b["labels"].numel() for b in batches) / real - 1
    rows = []

    def add_row(name, ms, tokens_per_s, flops_per_s, peak_gib, padding, graphs) -> None:
        mfu = f"**{flops_per_s / peak:.1%}**" if peak else "–"
        progress = f"{ms:.1f} ms/step, {tokens_per_s:,.0f} tokens/s, MFU {mfu}, {graphs} graphs"
        print(f"  {name}: {progress}, peak {peak_gib} GiB", file=sys.stderr, flush=True)
        rows.append([
            name, f"{ms:.1f}", f"{tokens_per_s:,.0f}", f"{flops_per_s / 1e12:.3g}", mfu,
            "–" if peak_gib is None else f"{peak_gib:.1f}", f"{padding:.1%}", str(graphs),
        ])  # fmt: skip

    for variant in args.variants.split(","):
        before = compiled_graphs()
        ms, tokens_per_s, flops_per_s, peak_gib = time_variant(
            variant, config, batches, device, args
        )
        add_row(
            variant, ms, tokens_per_s, flops_per_s, peak_gib, padding, compiled_graphs() - before
        )
    for extra in args.train_py or []:
        name = f"train.py {extra}".strip()
        with tempfile.TemporaryDirectory(prefix="bench_gpu_") as work:
            try:
                r = train_py(args, Path(work), extra.split())
            except RuntimeError as error:
                print(error, file=sys.stderr)
                continue
        ms = r["seconds"] / r["steps"] * 1e3
        add_row(name, ms, r["tokens"] / r["seconds"], r["flops"] / r["seconds"], r["peak_gib"],
                r["padding"], r["graphs"])  # fmt: skip
    sentences = np.mean([len(b["src_lengths"]) for b in batches])
    print_table(
        f"{size} model, bf16, {len(batches)} batches of ≤ {args.max_tokens} tokens a side "
        f"({sentences:.0f} sentences on average); bf16 peak {peak / 1e12 if peak else '?'} TFLOP/s",
        ["variant", "ms/step", "target tokens/s", "model TFLOP/s", "MFU", "peak GiB", "padding",
         "graphs"],
        rows,
    )  # fmt: skip
    profiled = [v for v in args.profile.split(",") if v]
    if profiled:
        classes = {v: profile_classes(config, v, batches, device) for v in profiled}
        order = [c for c in [*KERNEL_CLASSES, "other"] if any(c in t for t in classes.values())]
        table = [[c, *(f"{classes[v].get(c, 0.0):.1f}" for v in profiled)] for c in order]
        table.append(["total", *(f"{sum(classes[v].values()):.1f}" for v in profiled)])
        what = "device" if device.type == "cuda" else "CPU operator"
        print_table(
            f"{what} time per step (ms) by kernel class", ["kernel class", *profiled], table
        )


if __name__ == "__main__":
    main()
