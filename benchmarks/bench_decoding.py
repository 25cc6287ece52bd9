"""Decoding: our KV-cached greedy and beam search vs HF ``generate`` vs naive re-run decoding.

    python benchmarks/bench_decoding.py [--size small] [--batch-sizes 1 64] [--beams 1 4]
        [--max-new-tokens 32] [--repeats 5] [--ckpt PATH] [--one-by-one] [--no-hf]
        [--json out.json]

The model is ours (``--size``, post-norm, ``attention=sdpa``, random init); the HF competitor
is ``MarianMTModel`` of the same shape with our weights copied in (``competitors.py``), so
both compute the same function, and their outputs are checked to be the same, token for token.
The third competitor is our own search re-running the decoder over the whole prefix every
step, without a cache (``use_cache=False``).

Sources are Multi30k test sentences (8k joint BPE): one call decodes ``--sentences-b1``
sentences one at a time for batch size 1, or one padded batch of the first B sentences. An
untrained model hardly ever emits EOS, so every output runs to ``--max-new-tokens`` (HF's
``max_new_tokens``; ours ``max_len_a=0, max_len_b=N``): all competitors do the same number
of steps. Beam search ranks by summed log-probability (length penalty α = 0 for both: HF's
``length_penalty`` and ours differ in form), stops a sentence once ``beam`` hypotheses
ended (HF ``early_stopping=True``), and never outputs pad or BOS (HF ``suppress_tokens``).
tokens/s counts output tokens (EOS excluded) of all sentences of a call.

``--ckpt PATH`` decodes with a trained checkpoint of ``train.py`` instead (its own tokenizer
encodes the sources): real translations end by EOS at different steps, and a search that drops
finished sentences from the batch (ours) does less work than one that keeps them. A pre-norm
checkpoint runs without HF (Marian has only post-norm layers; ``--no-hf`` leaves HF out by
choice). ``--one-by-one`` adds, at batch > 1, the uncached re-run decoder run one sentence at a
time.
"""

from __future__ import annotations

import gzip
import itertools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from competitors import SIZES, build_marian, copy_into_marian, our_config  # noqa: E402
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

from transformer_nmt.decoding import beam_search, greedy_search, rerun_greedy_search  # noqa: E402
from transformer_nmt.model import Transformer  # noqa: E402


def test_sources(data_dir: str, count: int) -> tuple[list[torch.Tensor], dict]:
    """The first ``count`` Multi30k test sources (ids + EOS), and the special ids."""
    with multi30k(data_dir) as dm:
        test = dm.datasets["test"]
        collate = dm.collator
        sources = [collate([test[i]])["src_ids"][0] for i in range(count)]
        ids = {"pad": dm.pad_id, "bos": dm.bos_id, "eos": dm.eos_id, "vocab": dm.vocab_size}
    return sources, ids


def trained_model(ckpt_path: str, data_dir: str, count: int) -> tuple:
    """A trained checkpoint's model, the first ``count`` Multi30k test sources encoded by its
    tokenizer (ids + EOS), and its special ids."""
    from transformer_nmt.checkpoint import load_checkpoint
    from transformer_nmt.evaluation import Translator

    loaded = load_checkpoint(ckpt_path)
    path = Path(data_dir) / f"test_2016_flickr.{loaded.src_lang}.gz"
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        text = [line.rstrip("\n") for line in itertools.islice(lines, count)]
    encoded = Translator.from_checkpoint(loaded).encode(text)
    sources = [torch.tensor(ids) for ids in encoded]
    ids = {
        "pad": loaded.pad_id,
        "bos": loaded.bos_id,
        "eos": loaded.eos_id,
        "vocab": loaded.model.config.tgt_vocab_size,
    }
    return loaded.model, sources, ids


def pad_batch(sources: list[torch.Tensor], pad_id: int) -> torch.Tensor:
    return torch.nn.utils.rnn.pad_sequence(sources, batch_first=True, padding_value=pad_id)


def ours(model, beams: int, ids: dict, steps: int, use_cache: bool = True):
    """A function decoding a [B, S] batch with our search: token lists without BOS/EOS."""

    def decode(src_ids: torch.Tensor) -> list[list[int]]:
        if beams == 1:
            search = greedy_search if use_cache else rerun_greedy_search
            return search(model, src_ids, ids["bos"], ids["eos"], max_len_a=0.0, max_len_b=steps)
        hypotheses = beam_search(
            model,
            src_ids,
            ids["bos"],
            ids["eos"],
            beam_size=beams,
            length_penalty=0.0,
            max_len_a=0.0,
            max_len_b=steps,
            use_cache=use_cache,
        )
        return [sentence[0].tokens for sentence in hypotheses]

    return decode


def one_by_one(model, beams: int, ids: dict, steps: int):
    """The uncached re-run decoder, one sentence at a time: every sentence of the batch on its
    own, re-running the decoder over the whole prefix every step (no cache, no batching)."""
    decode_one = ours(model, beams, ids, steps, use_cache=False)

    def decode(src_ids: torch.Tensor) -> list[list[int]]:
        rows = [row[row != ids["pad"]][None] for row in src_ids]
        return [decode_one(row)[0] for row in rows]

    return decode


def hf_generate(marian, beams: int, ids: dict, steps: int):
    """A function decoding a [B, S] batch with ``marian.generate``: the same settings as ours."""
    from transformers import GenerationConfig

    beam_options = dict(length_penalty=0.0, early_stopping=True) if beams > 1 else {}
    config = GenerationConfig(
        do_sample=False,
        num_beams=beams,
        max_new_tokens=steps,
        min_new_tokens=0,
        suppress_tokens=sorted({ids["pad"], ids["bos"]} - {ids["eos"]}),
        decoder_start_token_id=ids["bos"],
        eos_token_id=ids["eos"],
        pad_token_id=ids["pad"],
        forced_eos_token_id=None,
        use_cache=True,
        **beam_options,
    )

    def decode(src_ids: torch.Tensor) -> list[list[int]]:
        with torch.inference_mode():
            out = marian.generate(
                input_ids=src_ids,
                attention_mask=src_ids != ids["pad"],
                generation_config=config,
            )
        return [_strip(row, ids) for row in out.tolist()]

    return decode


def _strip(row: list[int], ids: dict) -> list[int]:
    """HF output row -> tokens: drop the start symbol, cut at EOS, drop padding."""
    tokens = row[1:]
    if ids["eos"] in tokens:
        tokens = tokens[: tokens.index(ids["eos"])]
    return [t for t in tokens if t != ids["pad"]]


def calls(decode, batches: list[torch.Tensor]):
    """One timed call: decode every batch; keeps the last outputs for the equality check."""
    outputs: list[list[int]] = []

    def run() -> None:
        outputs.clear()
        for batch in batches:
            outputs.extend(decode(batch))

    return run, outputs


def main() -> None:
    parser = script_parser(__doc__)
    parser.add_argument("--size", choices=list(SIZES), default="small")
    parser.add_argument(
        "--data-dir",
        default=DEFAULT_MULTI30K,
        help="Multi30k (default: $MULTI30K_DIR, else data/multi30k)",
    )
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 4], help="1 = greedy")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument(
        "--sentences-b1", type=int, default=4, help="sentences per call at batch size 1"
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument(
        "--tune-malloc", action="store_true", help="keep large blocks in glibc's heap (all alike)"
    )
    parser.add_argument("--no-rerun", action="store_true", help="leave out the naive re-run")
    parser.add_argument("--no-hf", action="store_true", help="leave out HF generate")
    parser.add_argument(
        "--one-by-one", action="store_true", help="add re-run decoding one sentence at a time"
    )
    parser.add_argument(
        "--ckpt", default=None, help="a trained post-norm checkpoint instead of a random model"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    malloc_tuned = tune_malloc() if args.tune_malloc else False

    machine = print_header("Decoding: ours vs HF generate vs naive re-run", malloc_tuned)
    count = max(max(args.batch_sizes), args.sentences_b1)
    torch.manual_seed(args.seed)
    if args.ckpt:
        model, sources, ids = trained_model(args.ckpt, args.data_dir, count)
        config = model.config
        described = f"trained {args.ckpt}, at most {args.max_new_tokens} steps per sentence"
    else:
        sources, ids = test_sources(args.data_dir, count)
        config = our_config(args.size, vocab_size=ids["vocab"], attention="sdpa")
        model = Transformer(config).eval()
        described = f"{args.size} model, {args.max_new_tokens} steps per sentence"
    print(f"# {described}, vocab {ids['vocab']}, Multi30k test sources")
    marian = None
    if config.norm != "post":
        print("# HF generate left out: Marian has only post-norm layers")
    elif not args.no_hf:
        marian = build_marian(config, bos_id=ids["bos"], eos_id=ids["eos"]).eval()
        copy_into_marian(model, marian)

    tables = {}
    mismatches = []
    for beams in args.beams:
        for batch_size in args.batch_sizes:
            if batch_size == 1:
                batches = [s[None] for s in sources[: args.sentences_b1]]
            else:
                batches = [pad_batch(sources[:batch_size], ids["pad"])]
            n_sentences = sum(b.size(0) for b in batches)
            runs, outputs = {}, {}
            competitors = [("ours (KV cache)", ours(model, beams, ids, args.max_new_tokens))]
            if marian is not None:
                competitors.append(
                    ("HF generate", hf_generate(marian, beams, ids, args.max_new_tokens))
                )
            if not args.no_rerun:
                rerun = ours(model, beams, ids, args.max_new_tokens, False)
                competitors.append(("ours, re-run (no cache)", rerun))
            if args.one_by_one and batch_size > 1:
                single = one_by_one(model, beams, ids, args.max_new_tokens)
                competitors.append(("re-run, one sentence at a time", single))
            for name, decode in competitors:
                runs[name], outputs[name] = calls(decode, batches)
            search = "greedy" if beams == 1 else f"beam {beams}"
            title = f"{search}, batch {batch_size} ({n_sentences} sentences per call)"
            print(f"\n# {title}", file=sys.stderr)
            results = interleaved(runs, repeats=args.repeats, warmup=args.warmup)
            reference = outputs["ours (KV cache)"]
            for name, result in results.items():
                result.tokens = sum(len(tokens) for tokens in outputs[name])
                result.peak_mib = peak_memory_mib(runs[name])
                same = sum(a == b for a, b in zip(outputs[name], reference, strict=True))
                if name != "ours (KV cache)":
                    result.note = f"{same}/{n_sentences} same"
                    if same != n_sentences:
                        mismatches.append(f"{title}: {name} differs on {n_sentences - same}")
            print_table(results, reference="ours (KV cache)", title=title)
            tables[title] = results
    print(f"\n# outputs: {'; '.join(mismatches) if mismatches else 'all identical'}")
    print(f"# load average at the end: {load_average()}")
    dump_json(args.json, machine, tables)


if __name__ == "__main__":
    main()
