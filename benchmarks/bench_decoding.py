"""Decoding: our KV-cached search against CTranslate2 and Hugging Face ``generate``, in process,
and ``translate.py`` (``engine=torch``, ``engine=ct2``) as a user runs it.

    python benchmarks/bench_decoding.py [--ckpt PATH] [--batch-sizes 1 64] [--beams 1 4]
        [--sentences 64] [--threads 1] [--quick]

The checkpoint (default: ``train.py debug=smoke data=multi30k``, trained once into
``--work-dir``) is exported with ``export.py`` to CTranslate2 (float32 and int8) and to Hugging
Face. The sources are the first ``--sentences`` lines of Multi30k's test set (``$MULTI30K_DIR``),
encoded by the export's tokenizer. Every search stops at EOS or after ``--max-len`` tokens
(``max_len_a=0``), α = 0. In process, in padded batches of B, longest first, one call decoding
them all: **ours** (``greedy_search``/``beam_search``), **HF generate** (the export, its
``generate`` with our settings), **CTranslate2** called directly (``translate_batch``, one call
per batch, as ``engine=ct2`` calls it). As a user runs them: **translate.py** on the same lines
as one process (``search.batch_size=B``), wall time from start to exit, and "process start" the
same command on empty input. Times are medians (``Timer.blocked_autorange``).
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import median_s, print_table  # noqa: E402

from transformer_nmt.checkpoint import load_checkpoint  # noqa: E402
from transformer_nmt.decoding import beam_search, greedy_search  # noqa: E402
from transformer_nmt.export.ctranslate2 import vocabulary_tokens  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
QUANTIZATIONS = ("float32", "int8")


def run(script: str, *overrides: str, stdin: str = "", threads: int | None = None) -> str:
    """``python <script>.py overrides…`` from the repository root; its stdout."""
    env = dict(os.environ)
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    command = [sys.executable, str(REPO_ROOT / f"{script}.py"), *overrides]
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{script}.py {' '.join(overrides)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def prepare(args, work: Path) -> tuple[Path, dict[str, Path]]:
    """The checkpoint (trained with debug=smoke if none is given) and its exports."""
    ckpt = Path(args.ckpt) if args.ckpt else work / "smoke" / "checkpoints" / "best.ckpt"
    if not ckpt.is_file():
        run("train", "debug=smoke", "data=multi30k", f"hydra.run.dir={work / 'smoke'}")
    exports = {"hf": work / "hf"}
    run("export", f"ckpt_path={ckpt}", "format=hf", f"output={exports['hf']}", "overwrite=true")
    for quantization in QUANTIZATIONS:
        exports[quantization] = work / f"ct2-{quantization}"
        run(
            "export",
            f"ckpt_path={ckpt}",
            "format=ct2",
            f"quantization={quantization}",
            f"output={exports[quantization]}",
            "overwrite=true",
        )
    return ckpt, exports


def ours(model, ids: dict, beams: int, steps: int):
    def decode(src_ids: torch.Tensor) -> list[list[int]]:
        common = dict(max_len_a=0.0, max_len_b=steps)
        if beams == 1:
            return greedy_search(model, src_ids, ids["bos"], ids["eos"], **common)
        found = beam_search(
            model, src_ids, ids["bos"], ids["eos"], beam_size=beams, length_penalty=0.0, **common
        )
        return [hypotheses[0].tokens for hypotheses in found]

    return decode


def hf_generate(hf_dir: Path, ids: dict, beams: int, steps: int):
    from transformers import AutoModelForSeq2SeqLM, GenerationConfig

    model = AutoModelForSeq2SeqLM.from_pretrained(hf_dir).eval()
    config = GenerationConfig(
        do_sample=False,
        num_beams=beams,
        max_new_tokens=steps,
        decoder_start_token_id=ids["bos"],
        eos_token_id=ids["eos"],
        pad_token_id=ids["pad"],
        forced_eos_token_id=None,
        suppress_tokens=sorted({ids["pad"], ids["bos"]} - {ids["eos"]}),
        **(dict(length_penalty=0.0, early_stopping=True) if beams > 1 else {}),
    )

    def decode(src_ids: torch.Tensor) -> list[list[int]]:
        with torch.inference_mode():
            out = model.generate(
                input_ids=src_ids, attention_mask=src_ids != ids["pad"], generation_config=config
            )
        rows = [row[1:] for row in out.tolist()]  # after the start symbol, up to EOS
        rows = [row[: row.index(ids["eos"])] if ids["eos"] in row else row for row in rows]
        return [[t for t in row if t != ids["pad"]] for row in rows]

    return decode


def ct2_direct(model_dir: Path, ids: dict, tokens: list[str], beams: int, steps: int, threads):
    """``translate_batch`` as ``engine=ct2`` calls it (log-probability ranking for beams)."""
    import ctranslate2

    engine = ctranslate2.Translator(str(model_dir), inter_threads=1, intra_threads=threads)
    suppressed = [[tokens[i]] for i in sorted({ids["pad"], ids["bos"]} - {ids["eos"]})]
    index = {token: i for i, token in enumerate(tokens)}

    def decode(src_ids: torch.Tensor) -> list[list[int]]:
        pieces = [
            [tokens[t] for t in row if t not in (ids["pad"], ids["eos"])]
            for row in src_ids.tolist()
        ]
        results = engine.translate_batch(
            pieces,
            beam_size=beams,
            length_penalty=1e-6 if beams > 1 else 0.0,
            num_hypotheses=beams,
            max_decoding_length=steps,
            suppress_sequences=suppressed,
        )
        return [[index[t] for t in result.hypotheses[0]] for result in results]

    return decode


def each_batch(decode, batches: list[torch.Tensor]):
    return lambda: [decode(batch) for batch in batches]


def translate_py(overrides: list[str], stdin: str, threads: int):
    return lambda: run("translate", *overrides, stdin=stdin, threads=threads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", default=None, help="a train.py checkpoint (default: smoke)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 4], help="1: greedy")
    parser.add_argument("--sentences", type=int, default=64, help="sentences decoded per call")
    parser.add_argument("--max-len", type=int, default=32, help="most tokens a sentence")
    parser.add_argument("--threads", type=int, default=1, help="torch and CTranslate2 threads")
    parser.add_argument("--min-run-time", type=float, default=3.0, help="seconds per cell")
    parser.add_argument("--work-dir", default=str(Path(tempfile.gettempdir()) / "bench_decoding"))
    parser.add_argument("--data-dir", default=os.environ.get("MULTI30K_DIR"), help="Multi30k")
    parser.add_argument("--quick", action="store_true", help="16 sentences, 0.1 s a cell")
    args = parser.parse_args()
    if args.quick:
        args.sentences, args.min_run_time = 16, 0.1
    torch.set_num_threads(args.threads)
    work = Path(args.work_dir)
    ckpt, exports = prepare(args, work)
    loaded = load_checkpoint(ckpt)
    model, ids = (
        loaded.model.eval(),
        {"pad": loaded.pad_id, "bos": loaded.bos_id, "eos": loaded.eos_id},
    )
    with gzip.open(Path(args.data_dir) / f"test_2016_flickr.{loaded.src_lang}.gz", "rt") as lines:
        text = [line.rstrip("\n") for line in itertools.islice(lines, args.sentences)]
    from transformers import AutoTokenizer

    encoded = [
        torch.tensor(row) for row in AutoTokenizer.from_pretrained(exports["hf"])(text)["input_ids"]
    ]
    encoded.sort(key=len, reverse=True)
    tokens = vocabulary_tokens(loaded.tokenizer, model.config.tgt_vocab_size)  # as the export
    stdin = "\n".join(text) + "\n"
    header = [
        "search, batch",
        "ours",
        "HF generate",
        "CT2 float32",
        "CT2 int8",
        "translate.py torch",
        "translate.py ct2 float32",
        "translate.py ct2 int8",
        "same as ours (HF · CT2 float32)",
    ]
    rows = []
    for beams, batch_size in itertools.product(args.beams, args.batch_sizes):
        batches = [
            torch.nn.utils.rnn.pad_sequence(
                encoded[i : i + batch_size], batch_first=True, padding_value=ids["pad"]
            )
            for i in range(0, len(encoded), batch_size)
        ]
        decoders = {
            "ours": ours(model, ids, beams, args.max_len),
            "HF": hf_generate(exports["hf"], ids, beams, args.max_len),
            **{
                q: ct2_direct(exports[q], ids, tokens, beams, args.max_len, args.threads)
                for q in QUANTIZATIONS
            },
        }
        cells, outputs = [], {}
        for name, decode in decoders.items():
            outputs[name] = [row for batch in batches for row in decode(batch)]
            cells.append(median_s(each_batch(decode, batches), args.min_run_time))
        search = [
            "search.length_penalty=0",
            "search.max_len_a=0",
            f"search.max_len_b={args.max_len}",
            f"search.beam_size={beams}",
            f"search.batch_size={batch_size}",
        ]
        engines = [["engine=torch", f"ckpt_path={ckpt}"]] + [
            ["engine=ct2", f"model_dir={exports[q]}"] for q in QUANTIZATIONS
        ]
        for engine in engines:
            call = translate_py([*engine, *search], stdin, args.threads)
            cells.append(median_s(call, args.min_run_time))
        same = [
            sum(a == b for a, b in zip(outputs["ours"], outputs[n], strict=True))
            for n in ("HF", "float32")
        ]
        name = "greedy" if beams == 1 else f"beam {beams}"
        rows.append(
            [
                f"{name}, {batch_size}",
                *(f"{s * 1e3:,.0f}" for s in cells),
                f"{same[0]} · {same[1]} of {len(text)}",
            ]
        )
        print(f"  {rows[-1]}", file=sys.stderr)
    starts = [
        median_s(translate_py(engine, "", args.threads), args.min_run_time) for engine in engines
    ]
    rows.append(
        ["process start (empty input)", "", "", "", "", *(f"{s * 1e3:,.0f}" for s in starts), ""]
    )
    print_table(
        f"Decoding {len(text)} sentences, ms per call ({ckpt.name}, ≤ {args.max_len} tokens)",
        header,
        rows,
    )


if __name__ == "__main__":
    main()
