"""The paper's base model training in bf16 on one GPU: target tokens/s and model FLOPs utilisation.

    python benchmarks/bench_gpu.py [--max-tokens 25000] [--batches 8] [--repeats 5]
        [--variants eager,plain_loss,fused_adam,compile,...] [--profile VARIANT]
        [--train-py] [--train-runs as_configured,compile] [--train-steps 60] [--json out.json]
    python benchmarks/bench_gpu.py --batches 40 --warmup 0 --repeats 1   # a new shape every step
    python benchmarks/bench_gpu.py --model small --device cpu --max-tokens 1024   # check it runs

**The bare step** (every variant): the base model (Table 3 "base": N = 6, d_model 512, d_ff 2048,
h = 8, a 37,000-type shared vocabulary, post-norm, dropout 0.1) takes the training step that
``train.py trainer=gpu`` takes, written out: forward and loss under bf16 autocast, backward of the
loss sum, the step's token-mean gradient and its norm (``training/update.py``), one host read of
loss and norm for the non-finite check, clipping at 1.0, Adam, the Noam schedule. Batches are
token buckets of about ``--max-tokens`` padded tokens a side (the paper's ~25,000), of random
token ids with WMT-like lengths (log-normal, ~28 BPE tokens a sentence); ``--batches`` of them
are cycled, so after ``--warmup`` passes every shape has been seen (``--warmup 0 --repeats 1``
with many batches gives every step a new shape, as training does). Variants:

* ``eager``: what ``trainer=gpu`` runs (fused loss, ``torch.optim.Adam``'s default).
* ``plain_loss``: ``fused_loss=false`` (logits, then the loss).
* ``fused_adam``: ``Adam(fused=True)`` instead of the default implementation.
* ``compile``: ``compile=true`` (the model's forward through ``torch.compile``), fused Adam.
* ``compile_plain_loss``: the same with ``fused_loss=false``.
* ``compile_no_host_read``: ``compile`` without the per-step host read (what it costs).
* ``manual_attention``, ``compile_manual_attention``: ``model.attention=manual``.
* ``efficient_sdpa``: the fused attention restricted to PyTorch's memory-efficient kernel.

**MFU** = model FLOPs per second / the GPU's dense bf16 peak (datasheet; ``--peak-tflops``
overrides it). Model FLOPs count the matrix products the model must do for the batch's real
tokens, padding excluded: every linear layer, QKᵀ and AV over each sentence's own lengths (the
decoder's self-attention over its causal half), the output projection; backward twice forward.
Beside it, the rate of a large bf16 matrix product measured on the same GPU. Tokens/s counts
target (non-pad) tokens; times are medians of ``--repeats`` passes over the batches.
``--profile VARIANT`` prints where one pass of a variant spends its device time.

**train.py** (``--train-py``): the same model through ``python train.py trainer=gpu``, on a
synthetic corpus of ``--train-pairs`` pairs written as text files (its own BPE of 37,000 types),
``--train-steps`` optimizer steps of one ``--max-tokens`` batch each, timed from step 10 by a
callback that also counts each batch's model FLOPs, so its MFU compares with the bare step's
although its batches differ; ``--train-runs`` picks the runs (as configured; ``compile=true``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from lightning.pytorch.callbacks import Callback

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import REPO_ROOT, print_header, script_parser  # noqa: E402

from transformer_nmt.model import Transformer, TransformerConfig  # noqa: E402
from transformer_nmt.training.fused_loss import fused_loss  # noqa: E402
from transformer_nmt.training.loss import check_finite_update, label_smoothed_loss  # noqa: E402
from transformer_nmt.training.schedules import StepSchedule, build_scheduler  # noqa: E402
from transformer_nmt.training.update import TokenMeanUpdate, apply_update_scale  # noqa: E402

PAD, BOS, EOS, FIRST_WORD_ID = 0, 1, 2, 4
BENCHMARKS_DIR = Path(__file__).resolve().parent

# Dense bf16 tensor-core peaks (no sparsity), TFLOP/s, from the vendors' datasheets; the first
# name found in torch.cuda.get_device_name() wins.
BF16_PEAK_TFLOPS = {
    "H100 PCIe": 756.0,
    "H100 NVL": 835.0,
    "H100": 989.4,  # SXM
    "H200": 989.4,
    "A100": 312.0,
    "L40S": 362.1,
    "A10G": 70.0,
}

MODELS = {
    "base": {},  # TransformerConfig's defaults are the paper's base model
    "small": {"d_model": 128, "d_ff": 512, "n_heads": 4, "n_layers": 2},  # to check the script
}


@dataclass
class Variant:
    fused_loss: bool = True
    fused_adam: bool = False
    compile: bool = False
    host_read: bool = True
    attention: str = "sdpa"  # the model's attention (TransformerConfig.attention)
    sdpa_backend: str | None = None  # e.g. "EFFICIENT_ATTENTION": only this SDPA kernel


VARIANTS = {
    "eager": Variant(),
    "plain_loss": Variant(fused_loss=False),
    "fused_adam": Variant(fused_adam=True),
    "compile": Variant(fused_adam=True, compile=True),
    "compile_plain_loss": Variant(fused_loss=False, fused_adam=True, compile=True),
    "compile_no_host_read": Variant(fused_adam=True, compile=True, host_read=False),
    "manual_attention": Variant(attention="manual"),
    "efficient_sdpa": Variant(sdpa_backend="EFFICIENT_ATTENTION"),
    "compile_manual_attention": Variant(fused_adam=True, compile=True, attention="manual"),
}

TRAIN_RUNS = {"as_configured": [], "compile": ["compile=true"]}  # train.py runs: extra overrides


@dataclass
class Row:
    name: str
    median_ms: float  # one optimizer step
    tokens_per_s: float
    model_tflops: float  # model FLOPs per second, TFLOP/s
    mfu: float  # of the datasheet peak
    peak_gib: float | None  # device memory at the peak (allocated by tensors)
    note: str = ""


# -- FLOPs ---------------------------------------------------------------------------------------


def training_flops(config: TransformerConfig, src_lengths, tgt_lengths) -> float:
    """Model FLOPs of one training step (forward + backward = 3 x forward) on sentences of these
    real lengths (source with EOS, target with BOS), matrix products only, padding excluded."""
    src = np.asarray(src_lengths, dtype=np.float64)
    tgt = np.asarray(tgt_lengths, dtype=np.float64)
    d, d_ff = config.d_model, config.d_ff
    hk, hv = config.n_heads * config.d_k, config.n_heads * config.d_v  # widths of all heads
    s_tokens, t_tokens = src.sum(), tgt.sum()
    projections = 2 * d * (2 * hk + hv) + 2 * hv * d  # W^Q, W^K, W^V, W^O per token
    feed_forward = 4 * d * d_ff  # two linears per token
    encoder = s_tokens * (projections + feed_forward) + 2 * (src * src).sum() * (hk + hv)
    decoder = (
        t_tokens * (projections + feed_forward)
        + 2 * (tgt * (tgt + 1) / 2).sum() * (hk + hv)  # causal self-attention: QKᵀ and AV
        + t_tokens * (2 * d * hk + 2 * hv * d)  # cross-attention W^Q, W^O
        + s_tokens * 2 * d * (hk + hv)  # cross-attention W^K, W^V over the memory
        + 2 * (tgt * src).sum() * (hk + hv)  # cross-attention QKᵀ and AV
    )
    projection = t_tokens * 2 * d * config.tgt_vocab_size
    forward = config.n_encoder_layers * encoder + config.n_decoder_layers * decoder + projection
    return 3.0 * forward


def bf16_peak_tflops(device_name: str) -> float | None:
    for name, tflops in BF16_PEAK_TFLOPS.items():
        if name in device_name:
            return tflops
    return None


def measured_matmul_tflops(device: torch.device, size: int = 8192, repeats: int = 10) -> float:
    """A size^3 bf16 matrix product on random data: the median rate of ``repeats`` after three
    warm-ups, TFLOP/s (what the GPU's matrix units reach here, beside the datasheet)."""
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    times = []
    for index in range(3 + repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        a @ b
        torch.cuda.synchronize()
        if index >= 3:
            times.append(time.perf_counter() - start)
    return 2 * size**3 / statistics.median(times) / 1e12


# -- batches -------------------------------------------------------------------------------------


def sentence_lengths(count: int, rng: np.random.Generator, max_len: int) -> tuple:
    """(source, target) token counts with EOS (source) and BOS (target): log-normal, median ~24
    tokens, mean ~28, the target's length correlated with the source's."""
    source = np.exp(rng.normal(3.2, 0.55, count))
    target = source * np.exp(rng.normal(0.05, 0.15, count))
    clip = lambda x: np.clip(np.rint(x), 2, max_len - 1).astype(np.int64)  # noqa: E731
    return clip(source) + 1, clip(target) + 1


def token_bucket_batches(max_tokens: int, count: int, vocab_size: int, seed: int) -> list[dict]:
    """``count`` batches of random ids, each as many sentences of similar length as fit in
    ``max_tokens`` padded tokens a side, drawn from a sorted pool as a token-bucket sampler does."""
    rng = np.random.default_rng(seed)
    src_len, tgt_len = sentence_lengths(200_000, rng, max_len=256)
    longer = np.maximum(src_len, tgt_len)
    order = np.argsort(longer, kind="stable")
    buckets, start = [], 0
    while start < len(order):  # sorted: a bucket's longest sentence is its last
        end = start + 1
        while end < len(order) and (end - start + 1) * longer[order[end]] <= max_tokens:
            end += 1
        buckets.append(order[start:end])
        start = end
    chosen = rng.choice(len(buckets), size=min(count, len(buckets)), replace=False)
    return [bucket_batch(buckets[i], src_len, tgt_len, vocab_size, rng) for i in chosen]


def bucket_batch(indices, src_len, tgt_len, vocab_size: int, rng: np.random.Generator) -> dict:
    """The data module's batch dict for these sentences: src_ids (… EOS), tgt_in_ids (BOS …),
    labels (… EOS), padded with PAD; plus the real lengths for the FLOP count."""
    s, t = src_len[indices], tgt_len[indices]
    src = np.full((len(indices), s.max()), PAD, dtype=np.int64)
    tgt = np.full((len(indices), t.max() + 1), PAD, dtype=np.int64)
    for row, (n_src, n_tgt) in enumerate(zip(s, t, strict=True)):
        src[row, : n_src - 1] = rng.integers(FIRST_WORD_ID, vocab_size, n_src - 1)
        src[row, n_src - 1] = EOS
        tgt[row, 0] = BOS
        tgt[row, 1:n_tgt] = rng.integers(FIRST_WORD_ID, vocab_size, n_tgt - 1)
        tgt[row, n_tgt] = EOS
    return {
        "src_ids": torch.from_numpy(src),
        "tgt_in_ids": torch.from_numpy(tgt[:, :-1]),
        "labels": torch.from_numpy(tgt[:, 1:]),
        "src_lengths": s,
        "tgt_lengths": t,
    }


# -- the bare step -------------------------------------------------------------------------------


def bare_step(config: TransformerConfig, variant: Variant, device: torch.device, epsilon=0.1):
    """A function running train.py's optimizer step on one batch, as ``variant`` configures it."""
    torch.manual_seed(0)
    model = Transformer(dataclasses.replace(config, attention=variant.attention))
    model = model.to(device).train()
    forward = model.forward_hidden if variant.fused_loss else model.forward
    if variant.compile:
        forward = torch.compile(forward)
    optimizer = torch.optim.Adam(
        model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9, fused=variant.fused_adam or None
    )
    scheduler = build_scheduler(optimizer, StepSchedule(d_model=config.d_model))
    update = TokenMeanUpdate()
    parameters = list(model.parameters())
    autocast = torch.autocast(device.type, dtype=torch.bfloat16)
    backends = contextlib.nullcontext
    if variant.sdpa_backend:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backends = functools.partial(sdpa_kernel, getattr(SDPBackend, variant.sdpa_backend))

    def step(batch: dict) -> None:
        with autocast, backends():
            outputs = forward(batch["src_ids"], batch["tgt_in_ids"])
            if variant.fused_loss:
                weight = model.output_projection.weight
                losses = fused_loss(outputs, weight, batch["labels"], PAD, epsilon)
            else:
                losses = label_smoothed_loss(outputs, batch["labels"], PAD, epsilon)
        update.add(losses)
        losses.loss_sum.backward()
        gradients = [p.grad for p in parameters if p.grad is not None]
        totals = update.finish(gradients, reduce_sum=lambda sums: sums, backward_divisor=1)
        if variant.host_read:
            numbers = totals.means()  # train.py's one wait for the device per step
            check_finite_update(scheduler.last_epoch + 1, numbers.loss, numbers.grad_norm)
        apply_update_scale(gradients, totals, 1.0, "norm")
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()

    return step


def profile_variant(name, config, batches, device) -> None:
    """Print the kernels and operators one pass of ``name`` spends its device time in."""
    from torch.profiler import ProfilerActivity, profile

    step = bare_step(config, VARIANTS[name], device)
    on_device = [{k: v.to(device) for k, v in b.items() if torch.is_tensor(v)} for b in batches]
    for _ in range(2):
        for batch in on_device:
            step(batch)
    synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
        for batch in on_device:
            step(batch)
        synchronize(device)
    print(f"\n## where {name}'s device time goes ({len(batches)} steps)")
    table = profiler.key_averages().table(sort_by="self_cuda_time_total", row_limit=30)
    print(table)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_variant(name, config, batches, device, repeats: int, warmup: int, peak: float) -> Row:
    variant = VARIANTS[name]
    step = bare_step(config, variant, device)
    on_device = [
        {k: v.to(device, non_blocking=True) for k, v in b.items() if torch.is_tensor(v)}
        for b in batches
    ]
    flops = sum(training_flops(config, b["src_lengths"], b["tgt_lengths"]) for b in batches)
    tokens = sum(int(b["tgt_lengths"].sum()) for b in batches)  # labels: tgt length, EOS for BOS
    started = time.perf_counter()
    for _ in range(warmup):  # every batch shape once at least: compilation happens here
        for batch in on_device:
            step(batch)
    synchronize(device)
    warmup_s = time.perf_counter() - started
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seconds = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        for batch in on_device:
            step(batch)
        synchronize(device)
        seconds.append(time.perf_counter() - start)
    median = statistics.median(seconds)
    peak_gib = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    model_tflops = flops / median / 1e12
    print(
        f"  {name}: {median / len(batches) * 1e3:.1f} ms/step, {model_tflops:.0f} TFLOP/s (passes "
        f"{min(seconds) * 1e3:.0f}–{max(seconds) * 1e3:.0f} ms), warm-up {warmup_s:.0f} s",
        file=sys.stderr,
        flush=True,
    )
    return Row(
        name=name,
        median_ms=median / len(batches) * 1e3,
        tokens_per_s=tokens / median,
        model_tflops=model_tflops,
        mfu=model_tflops / peak if peak else float("nan"),
        peak_gib=peak_gib,
        note=f"warm-up {warmup_s:.0f} s",
    )


# -- train.py ------------------------------------------------------------------------------------


class FlopsTimer(Callback):
    """Added to train.py on the command line: wall seconds, target tokens and model FLOPs from the
    start of optimizer step ``warmup_steps`` + 1 to the end of the last, written to ``out``."""

    def __init__(self, out: str, warmup_steps: int) -> None:
        self.out, self.warmup_steps = out, warmup_steps
        self._start: float | None = None
        self._end = 0.0
        self._tokens = 0
        self._flops = 0.0
        self._steps = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self._start is None and trainer.global_step == self.warmup_steps:
            synchronize(pl_module.device)
            self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._start is None:
            return
        pad = pl_module.hparams.pad_id
        src_lengths = (batch["src_ids"] != pad).sum(dim=1).cpu().numpy()
        tgt_lengths = (batch["labels"] != pad).sum(dim=1).cpu().numpy()  # real labels
        self._flops += training_flops(pl_module.model.config, src_lengths, tgt_lengths)
        self._tokens += int(tgt_lengths.sum())
        self._steps += 1
        synchronize(pl_module.device)
        self._end = time.perf_counter()

    def on_train_end(self, trainer, pl_module) -> None:
        seconds = self._end - self._start
        result = {"seconds": seconds, "tokens": self._tokens, "flops": self._flops}
        Path(self.out).write_text(json.dumps({**result, "steps": self._steps}))


def write_text_corpus(directory: Path, pairs: int, seed: int) -> None:
    """Line-aligned train/val/test .de/.en files of made-up words with Zipf frequencies (100,000
    types a language, 3-10 letters) and log-normal lengths of ~20 words."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    directory.mkdir(parents=True, exist_ok=True)
    for lang in ("de", "en"):
        sizes = rng.integers(3, 11, 100_000)
        words = np.array(["".join(rng.choice(letters, n)) for n in sizes])
        weights = 1.0 / np.arange(1, len(words) + 1)
        weights /= weights.sum()
        lang_rng = np.random.default_rng(seed)  # the same lengths on both sides
        for split, n in (("train", pairs), ("val", 500), ("test", 500)):
            lengths = np.clip(np.rint(np.exp(lang_rng.normal(2.9, 0.5, n))), 1, 120).astype(int)
            drawn = rng.choice(len(words), size=int(lengths.sum()), p=weights)
            ends = np.cumsum(lengths)
            lines = (" ".join(words[drawn[e - k : e]]) for e, k in zip(ends, lengths, strict=True))
            (directory / f"{split}.{lang}").write_text("\n".join(lines) + "\n")


def train_py_row(name: str, args, corpus: Path, work: Path, peak: float, extra: list[str]) -> Row:
    out = work / f"{name}.json"
    on_gpu = args.device.startswith("cuda")
    overrides = [
        "trainer=gpu" if on_gpu else "trainer=cpu",
        *([] if on_gpu else ["trainer.precision=bf16-mixed"]),
        *(f"model.{key}={value}" for key, value in MODELS[args.model].items()),
        "data=text_files",
        f"data.data_dir={corpus}",
        f"data.cache_dir={work / 'cache'}",
        f"data.vocab_size={args.vocab_size}",
        f"data.max_tokens={args.max_tokens}",
        "trainer.accumulate_grad_batches=1",
        f"trainer.max_steps={args.train_steps}",
        "trainer.val_check_interval=100000",
        "trainer.num_sanity_val_steps=0",
        "trainer.enable_progress_bar=false",
        "final_eval.splits=[]",
        "optimized_metric=null",
        "logger=csv",
        f"hydra.run.dir={work / name}",
        "+callbacks.flops_timer._target_=bench_gpu.FlopsTimer",
        f"+callbacks.flops_timer.out={out}",
        "+callbacks.flops_timer.warmup_steps=10",
        *extra,
    ]
    path = [str(REPO_ROOT / "src"), str(BENCHMARKS_DIR), os.environ.get("PYTHONPATH", "")]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "train.py"), *overrides],
        cwd=work,
        env=environment,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"train.py failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
    timed = json.loads(out.read_text())
    step_s = timed["seconds"] / timed["steps"]
    model_tflops = timed["flops"] / timed["seconds"] / 1e12
    return Row(
        name=f"train.py {name}",
        median_ms=step_s * 1e3,
        tokens_per_s=timed["tokens"] / timed["seconds"],
        model_tflops=model_tflops,
        mfu=model_tflops / peak if peak else float("nan"),
        peak_gib=None,
        note=f"{timed['steps']} steps timed; run {time.perf_counter() - started:.0f} s",
    )


# -- main ----------------------------------------------------------------------------------------


def print_rows(rows: list[Row], reference: str) -> None:
    base = next(row for row in rows if row.name == reference)
    header = "variant | ms/step | target tokens/s | model TFLOP/s | MFU"
    print(f"\n| {header} | ÷ {reference} | peak GiB | note |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for row in rows:
        peak = f"{row.peak_gib:.1f}" if row.peak_gib is not None else "–"
        print(
            f"| {row.name} | {row.median_ms:.1f} | {row.tokens_per_s:,.0f} | "
            f"{row.model_tflops:.0f} | **{row.mfu:.1%}** | "
            f"{row.tokens_per_s / base.tokens_per_s:.2f} | {peak} | {row.note} |"
        )


def main() -> None:
    parser = script_parser(__doc__)
    parser.add_argument("--model", choices=sorted(MODELS), default="base")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--vocab-size", type=int, default=37000)
    parser.add_argument("--max-tokens", type=int, default=25000, help="padded tokens a side")
    parser.add_argument("--batches", type=int, default=8, help="distinct batches, cycled")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes over the batches")
    parser.add_argument("--warmup", type=int, default=2, help="untimed passes (compilation)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--peak-tflops", type=float, default=None, help="the GPU's bf16 peak")
    parser.add_argument("--profile", default=None, help="a variant to profile (CUDA kernels)")
    parser.add_argument("--train-py", action="store_true", help="also time train.py")
    parser.add_argument("--train-steps", type=int, default=60)
    parser.add_argument("--train-runs", default="as_configured,compile", help="train.py runs")
    parser.add_argument("--train-pairs", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    device = torch.device(args.device)
    machine = print_header("The base model's training step in bf16 on one GPU")
    names = [name.strip() for name in args.variants.split(",") if name.strip()]
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    train_runs = [name.strip() for name in args.train_runs.split(",") if name.strip()]
    if args.train_py and set(train_runs) - set(TRAIN_RUNS):
        parser.error(f"unknown train.py runs; choose from {', '.join(TRAIN_RUNS)}")
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak = args.peak_tflops or bf16_peak_tflops(device_name)
    matmul = measured_matmul_tflops(device) if device.type == "cuda" else None
    config = TransformerConfig(
        src_vocab_size=args.vocab_size, tgt_vocab_size=args.vocab_size, pad_id=PAD,
        **MODELS[args.model],
    )  # fmt: skip
    n_parameters = sum(p.numel() for p in Transformer(config).parameters())
    batches = token_bucket_batches(args.max_tokens, args.batches, args.vocab_size, args.seed)
    padded = sum(b["src_ids"].numel() + b["labels"].numel() for b in batches)
    real = sum(int(b["src_lengths"].sum() + b["tgt_lengths"].sum()) for b in batches)
    print(
        f"# {device_name}: bf16 peak {peak} TFLOP/s (datasheet), 8192^3 bf16 matmul measured "
        f"{matmul and round(matmul)} TFLOP/s\n# model {args.model}: {n_parameters:,} parameters;"
        f" {len(batches)} batches of ≤ {args.max_tokens} padded tokens a side, "
        f"{np.mean([len(b['src_lengths']) for b in batches]):.0f} sentences and "
        f"{np.mean([b['tgt_lengths'].sum() for b in batches]):,.0f} target tokens on average, "
        f"{1 - real / padded:.1%} padding"
    )
    rows = []
    for name in names:
        rows.append(
            time_variant(name, config, batches, device, args.repeats, args.warmup, peak or 0)
        )
        torch.cuda.empty_cache() if device.type == "cuda" else None
    if args.profile:
        profile_variant(args.profile, config, batches, device)
    if args.train_py:
        with tempfile.TemporaryDirectory(prefix="transformer_nmt_gpu_") as work:
            work = Path(work)
            write_text_corpus(work / "corpus", args.train_pairs, args.seed)
            for name in train_runs:
                extra = TRAIN_RUNS[name]
                rows.append(train_py_row(name, args, work / "corpus", work, peak or 0, extra))
                row = rows[-1]
                print(
                    f"  {row.name}: {row.median_ms:.1f} ms/step, {row.model_tflops:.0f} TFLOP/s",
                    file=sys.stderr,
                )
    print_rows(rows, reference=names[0])
    if args.json:
        payload = {
            "machine": machine,
            "command": "python " + " ".join(sys.argv),
            "device": device_name,
            "peak_tflops": peak,
            "measured_matmul_tflops": matmul,
            "parameters": n_parameters,
            "rows": [asdict(row) for row in rows],
        }
        Path(args.json).write_text(json.dumps(payload, indent=2))
        print(f"\nwrote {args.json}")
    if not math.isfinite(rows[0].tokens_per_s):
        raise SystemExit("no timing")


if __name__ == "__main__":
    main()
