"""Decoding: our KV-cached greedy and beam search vs CTranslate2 (float32, int8) vs HF
``generate`` vs naive re-run decoding.

    python benchmarks/bench_decoding.py [--size small] [--batch-sizes 1 64] [--beams 1 4]
        [--max-new-tokens 32] [--sentences 64] [--repeats 5] [--ckpt PATH] [--one-by-one]
        [--no-hf] [--no-ct2] [--no-rerun] [--threads N] [--json out.json]

The model is ours (``--size``, post-norm, ``attention=sdpa``, random init); the HF competitor
is ``MarianMTModel`` of the same shape with our weights copied in (``competitors.py``), so
both compute the same function, and their outputs are checked to be the same, token for token.
CTranslate2 decodes the model exported by ``transformer_nmt.export.export_ctranslate2`` in
float32 and in int8, through ``CTranslate2Translator`` (what ``translate.py engine=ct2`` runs),
with as many threads as torch. The last competitor is our own search re-running the decoder
over the whole prefix every step, without a cache (``use_cache=False``).

Sources are Multi30k test sentences (8k joint BPE): one call decodes ``--sentences-b1``
sentences one at a time for batch size 1, or the first ``--sentences`` sentences, longest
first, in padded batches of B (as ``translate_token_ids`` does). An untrained model hardly ever
emits EOS, so every output runs to ``--max-new-tokens`` (HF's ``max_new_tokens``; ours and
CTranslate2's ``max_len_a=0, max_len_b=N``): all competitors do the same number of steps. Beam
search ranks by summed log-probability (length penalty α = 0 for all: HF's ``length_penalty``
and ours differ in form), stops a sentence once ``beam`` hypotheses ended (HF
``early_stopping=True``), and never outputs pad or BOS (HF ``suppress_tokens``). tokens/s
counts output tokens (EOS excluded) of all sentences of a call; the table gives wall and process
CPU time (CTranslate2's worker threads belong to the process, so its work is counted).

``--ckpt PATH`` decodes with a trained checkpoint of ``train.py`` instead (its own tokenizer
encodes the sources): real translations end by EOS at different steps, and a search that drops
finished sentences from the batch (ours) does less work than one that keeps them. It also
scores every engine's translations of the whole ``val`` split with sacreBLEU, with the same
search, detokenisation and sacreBLEU call as ``evaluate.py``. A pre-norm checkpoint runs
without HF (Marian has only post-norm layers; ``--no-hf`` leaves HF out by choice).
``--one-by-one`` adds, at batch > 1, the uncached re-run decoder run one sentence at a time.
"""

from __future__ import annotations

import gzip
import itertools
import sys
import tempfile
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

from transformer_nmt.checkpoint import LoadedCheckpoint, load_checkpoint  # noqa: E402
from transformer_nmt.decoding import (  # noqa: E402
    SearchOptions,
    beam_search,
    greedy_search,
    rerun_greedy_search,
)
from transformer_nmt.evaluation import Translator, corpus_scores  # noqa: E402
from transformer_nmt.model import Transformer  # noqa: E402

CT2_QUANTIZATIONS = ("float32", "int8")


def test_sources(data_dir: str, count: int) -> tuple[list[torch.Tensor], dict, object]:
    """The first ``count`` Multi30k test sources (ids + EOS), the special ids and the tokenizer."""
    with multi30k(data_dir) as dm:
        test = dm.datasets["test"]
        collate = dm.collator
        sources = [collate([test[i]])["src_ids"][0] for i in range(count)]
        ids = {"pad": dm.pad_id, "bos": dm.bos_id, "eos": dm.eos_id, "vocab": dm.vocab_size}
        return sources, ids, dm.tokenizer


def read_split(data_dir: str, name: str, lang: str, count: int | None = None) -> list[str]:
    """Lines of Multi30k's ``{name}.{lang}.gz``."""
    with gzip.open(Path(data_dir) / f"{name}.{lang}.gz", "rt", encoding="utf-8") as lines:
        return [line.rstrip("\n") for line in itertools.islice(lines, count)]


def trained_model(ckpt_path: str, data_dir: str, count: int) -> tuple:
    """A trained checkpoint (loaded), the first ``count`` Multi30k test sources encoded by its
    tokenizer (ids + EOS), and its special ids."""
    loaded = load_checkpoint(ckpt_path)
    text = read_split(data_dir, "test_2016_flickr", loaded.src_lang, count)
    encoded = Translator.from_checkpoint(loaded).encode(text)
    sources = [torch.tensor(ids) for ids in encoded]
    ids = {
        "pad": loaded.pad_id,
        "bos": loaded.bos_id,
        "eos": loaded.eos_id,
        "vocab": loaded.model.config.tgt_vocab_size,
    }
    return loaded, sources, ids


def export_to_ct2(checkpoint: LoadedCheckpoint, directory: Path) -> dict[str, Path]:
    """The model exported to CTranslate2 in every quantization of :data:`CT2_QUANTIZATIONS`."""
    from transformer_nmt.export import export_ctranslate2

    return {q: export_ctranslate2(checkpoint, directory / q, q) for q in CT2_QUANTIZATIONS}


def search_options(beams: int, steps: int, batch_size: int) -> SearchOptions:
    """The benchmark's search: α = 0, at most ``steps`` tokens per sentence."""
    return SearchOptions(
        beam_size=beams, length_penalty=0.0, max_len_a=0.0, max_len_b=steps, batch_size=batch_size
    )


def ct2_decode(model_dir: Path, options: SearchOptions):
    """A function decoding a [B, S] batch with CTranslate2: token lists without BOS/EOS."""
    from transformer_nmt.evaluation import CTranslate2Translator

    translator = CTranslate2Translator(model_dir, options)
    pad = translator.metadata.pad_id

    def decode(src_ids: torch.Tensor) -> list[list[int]]:
        return translator.translate_ids([[t for t in row if t != pad] for row in src_ids.tolist()])

    return decode


def val_bleu(checkpoint: LoadedCheckpoint, ct2_dirs: dict, data_dir: str, options) -> dict:
    """sacreBLEU of each engine's translations of the val split, as ``evaluate.py`` scores."""
    from transformer_nmt.evaluation import CTranslate2Translator

    sources = read_split(data_dir, "val", checkpoint.src_lang)
    references = read_split(data_dir, "val", checkpoint.tgt_lang)
    translators = {"ours (KV cache)": Translator.from_checkpoint(checkpoint, options)}
    for quantization, directory in ct2_dirs.items():
        translators[f"CTranslate2 {quantization}"] = CTranslate2Translator(directory, options)
    return {
        name: corpus_scores(translator.translate(sources), references).bleu
        for name, translator in translators.items()
    }


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
    parser.add_argument("--no-ct2", action="store_true", help="leave out CTranslate2")
    parser.add_argument(
        "--sentences", type=int, default=64, help="sentences per call at batch sizes > 1"
    )
    parser.add_argument(
        "--one-by-one", action="store_true", help="add re-run decoding one sentence at a time"
    )
    parser.add_argument(
        "--ckpt", default=None, help="a trained checkpoint instead of a random model"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    malloc_tuned = tune_malloc() if args.tune_malloc else False

    machine = print_header("Decoding: ours vs CTranslate2 vs HF generate vs re-run", malloc_tuned)
    count = max(max(args.batch_sizes), args.sentences, args.sentences_b1)
    torch.manual_seed(args.seed)
    if args.ckpt:
        checkpoint, sources, ids = trained_model(args.ckpt, args.data_dir, count)
        model = checkpoint.model
        described = f"trained {args.ckpt}, at most {args.max_new_tokens} steps per sentence"
    else:
        sources, ids, tokenizer = test_sources(args.data_dir, count)
        model = Transformer(our_config(args.size, vocab_size=ids["vocab"], attention="sdpa"))
        checkpoint = LoadedCheckpoint(
            Path(f"random {args.size} model"), model.eval(), tokenizer, "", "en", "de",
            ids["bos"], ids["eos"], ids["pad"], {},
        )  # fmt: skip
        described = f"{args.size} model, {args.max_new_tokens} steps per sentence"
    config = model.config
    print(f"# {described}, vocab {ids['vocab']}, Multi30k test sources")
    marian = None
    if config.norm != "post":
        print("# HF generate left out: Marian has only post-norm layers")
    elif not args.no_hf:
        marian = build_marian(config, bos_id=ids["bos"], eos_id=ids["eos"]).eval()
        copy_into_marian(model, marian)
    with tempfile.TemporaryDirectory(prefix="bench_decoding_") as work:
        ct2_dirs = {} if args.no_ct2 else export_to_ct2(checkpoint, Path(work))
        if ct2_dirs:
            sizes = ", ".join(
                f"{q} {(d / 'model.bin').stat().st_size / 2**20:.1f}" for q, d in ct2_dirs.items()
            )
            print(f"# CTranslate2 model.bin MiB: {sizes}")
        tables, mismatches, bleu = run_tables(args, model, sources, ids, marian, ct2_dirs)
        if args.ckpt:
            for beams in args.beams:
                options = search_options(beams, args.max_new_tokens, max(args.batch_sizes))
                scores = val_bleu(checkpoint, ct2_dirs, args.data_dir, options)
                bleu[f"beam {beams}"] = scores
                listed = ", ".join(f"{name} {value:.2f}" for name, value in scores.items())
                print(f"# val BLEU, {'greedy' if beams == 1 else f'beam {beams}'}: {listed}")
    print(f"\n# outputs: {'; '.join(mismatches) if mismatches else 'all identical'}")
    print(f"# load average at the end: {load_average()}")
    dump_json(args.json, machine, tables, {"val_bleu": bleu} if bleu else None)


def run_tables(args, model, sources, ids, marian, ct2_dirs) -> tuple[dict, list, dict]:
    """Time every competitor for every search and batch size; print one table each."""
    tables, mismatches = {}, []
    for beams in args.beams:
        for batch_size in args.batch_sizes:
            if batch_size == 1:
                batches = [s[None] for s in sources[: args.sentences_b1]]
            else:
                chosen = sorted(sources[: args.sentences], key=len, reverse=True)
                batches = [
                    pad_batch(chosen[i : i + batch_size], ids["pad"])
                    for i in range(0, len(chosen), batch_size)
                ]
            n_sentences = sum(b.size(0) for b in batches)
            runs, outputs = {}, {}
            competitors = [("ours (KV cache)", ours(model, beams, ids, args.max_new_tokens))]
            options = search_options(beams, args.max_new_tokens, batch_size)
            for quantization, directory in ct2_dirs.items():
                competitors.append((f"CTranslate2 {quantization}", ct2_decode(directory, options)))
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
                    if same != n_sentences and name != "CTranslate2 int8":
                        mismatches.append(f"{title}: {name} differs on {n_sentences - same}")
            print_table(results, reference="ours (KV cache)", title=title)
            tables[title] = results
    return tables, mismatches, {}


if __name__ == "__main__":
    main()
