"""Export to a Hugging Face folder that ``AutoTokenizer`` and ``AutoModelForSeq2SeqLM`` load
with no project code: post-norm models become ``MarianMTModel``, pre-norm models
``PegasusForConditionalGeneration`` (pre-norm layers and a final LayerNorm per stack).

The folder holds ``model.safetensors``, ``config.json``, ``generation_config.json`` (our search:
decoder start = our BOS, pad and BOS never generated, nothing forced), the tokenizer (ours,
appending ``</s>`` to every source as :class:`~transformer_nmt.evaluation.Translator` does),
``transformer_nmt.json`` (our config and ids) and a ``README.md`` model card: ready for
``push_to_hub`` / ``huggingface_hub.upload_folder``. It is built beside the output directory,
reloaded with ``AutoModelForSeq2SeqLM`` and its logits compared with ours, and only then renamed
into place.

How ``generate`` still differs from our search (docs/design.md): one ``max_new_tokens`` per call
instead of our per-sentence ⌊a·|src| + b⌋, and finished beams ranked by logp / |Y|^lp instead of
GNMT's logp / ((5 + |Y|) / 6)^α; the two rankings agree for α = 0.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch import Tensor

from transformer_nmt.atomic import write_directory_atomically
from transformer_nmt.checkpoint import LoadedCheckpoint
from transformer_nmt.decoding import SearchOptions
from transformer_nmt.decoding.steps import banned_token_ids
from transformer_nmt.model import TransformerConfig

from .errors import UnsupportedModelError, raise_if_problems
from .hf_parameters import hf_state_dict
from .metadata import ExportMetadata
from .model_card import model_card
from .output import check_export_output, export_inputs, weight_bytes
from .verification import check_same_logits, our_logits, probe_batch

# our norm -> (HF model_type, model class)
HF_ARCHITECTURES = {
    "post": ("marian", "MarianMTModel"),
    "pre": ("pegasus", "PegasusForConditionalGeneration"),
}
CT2_HINT = "export format=ct2 instead, which holds every shape of this project"


def check_huggingface_compatible(config: TransformerConfig) -> None:
    """Raise one :class:`~transformer_nmt.export.UnsupportedModelError` naming every field that
    Marian (post-norm) or Pegasus (pre-norm) cannot hold, or return."""
    model_type = HF_ARCHITECTURES[config.norm][0]
    problems = []
    if config.positional != "sinusoidal":
        problems.append(
            f"positional={config.positional!r} (Marian and Pegasus have fixed sinusoids only)"
        )
    if config.norm_layer != "layernorm":
        problems.append(
            f"norm_layer={config.norm_layer!r} (Marian and Pegasus have LayerNorm only)"
        )
    if config.d_k * config.n_heads != config.d_model or config.d_v != config.d_k:
        problems.append(
            f"d_k={config.d_k}, d_v={config.d_v} (HF attention has d_k = d_v = d_model / n_heads "
            f"= {config.d_model // config.n_heads})"
        )
    if config.src_vocab_size != config.tgt_vocab_size:
        problems.append(
            f"src_vocab_size={config.src_vocab_size} != tgt_vocab_size={config.tgt_vocab_size} "
            f"(an HF folder holds one tokenizer for both sides)"
        )
    if model_type == "pegasus" and not config.share_all_embeddings:
        problems.append(
            "share_all_embeddings=False with norm='pre' (Pegasus has one embedding matrix for "
            "both stacks; Marian, for post-norm models, has two)"
        )
    if problems:
        problems[-1] += f"; {CT2_HINT}"
    raise_if_problems(f"Hugging Face {model_type}", problems)


def hf_model_config(config: TransformerConfig, bos_id: int, eos_id: int, pad_id: int):
    """A ``MarianConfig`` (post-norm) or ``PegasusConfig`` (pre-norm) of our shape.

    Flags that differ from HF's defaults: ``scale_embedding=True`` (√d_model, §3.4);
    ``activation_function`` ours (Marian's default is swish, Pegasus's gelu);
    ``forced_eos_token_id=None`` (both force EOS at the length limit, our search does not);
    ``decoder_start_token_id`` = our BOS; ``activation_dropout=0`` (our FFN has no inner dropout);
    ``attention_dropout`` ours (both drop attention probabilities, as we do).
    """
    from transformers import MarianConfig, PegasusConfig

    common = dict(
        vocab_size=config.tgt_vocab_size,
        d_model=config.d_model,
        encoder_layers=config.n_encoder_layers,
        decoder_layers=config.n_decoder_layers,
        encoder_attention_heads=config.n_heads,
        decoder_attention_heads=config.n_heads,
        encoder_ffn_dim=config.d_ff,
        decoder_ffn_dim=config.d_ff,
        activation_function=config.activation,
        scale_embedding=True,
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=0.0,
        max_position_embeddings=config.max_len,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        decoder_start_token_id=bos_id,
        forced_eos_token_id=None,
        tie_word_embeddings=config.tie_embeddings,
    )
    if config.norm == "post":
        return MarianConfig(
            **common,
            bos_token_id=None,
            share_encoder_decoder_embeddings=config.share_all_embeddings,
            decoder_vocab_size=config.tgt_vocab_size,
        )
    return PegasusConfig(**common)


def hf_generation_config(
    config: TransformerConfig, bos_id: int, eos_id: int, pad_id: int, search: SearchOptions
):
    """``GenerationConfig`` of our search: greedy for ``beam_size=1``, else beam search that
    stops at ``beam_size`` finished hypotheses (``early_stopping=True``, ours) with
    ``length_penalty`` = α; pad and the decoder start never generated (``suppress_tokens``,
    applied after the log-softmax as ours, not renormalised); nothing forced; at most
    ``max_len - 1`` new tokens (the positions; HF's default of 20 would cut outputs short)."""
    from transformers import GenerationConfig

    beam = {}
    if search.beam_size > 1:
        beam = dict(early_stopping=True, length_penalty=float(search.length_penalty))
    return GenerationConfig(
        decoder_start_token_id=bos_id,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        forced_bos_token_id=None,
        forced_eos_token_id=None,
        suppress_tokens=sorted(banned_token_ids(pad_id, bos_id, eos_id)) or None,
        do_sample=False,
        num_beams=search.beam_size,
        max_new_tokens=config.max_len - 1,
        **beam,
    )


def source_eos_tokenizer(tokenizer, max_len: int, eos_id: int):
    """A copy of ``tokenizer`` that encodes as our pipeline: ids + EOS for sources (and for
    ``text_target``), at most ``max_len`` tokens. A fast tokenizer gets a post-processor that
    appends the EOS; another must append it already (Marian's SentencePiece tokenizer does)."""
    from tokenizers import processors

    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.model_max_length = max_len
    eos = tokenizer.convert_ids_to_tokens(eos_id)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        backend.post_processor = processors.TemplateProcessing(
            single=f"$A:0 {eos}:0",
            pair=f"$A:0 {eos}:0 $B:1 {eos}:1",
            special_tokens=[(eos, eos_id)],
        )
    probe = tokenizer("a b")["input_ids"]
    if not probe or probe[-1] != eos_id or probe.count(eos_id) != 1:
        raise UnsupportedModelError(
            "Hugging Face",
            [
                f"tokenizer {type(tokenizer).__name__} encodes 'a b' as {probe}, without the one "
                f"trailing EOS ({eos_id}) our model expects, and has no post-processor to add it"
            ],
        )
    return tokenizer


def export_huggingface(
    checkpoint: LoadedCheckpoint,
    output_dir: Path | str,
    search: SearchOptions | None = None,
    *,
    overwrite: bool = False,
) -> Path:
    """Write ``checkpoint``'s model and tokenizer as a Marian (post-norm) or Pegasus (pre-norm)
    folder whose ``generation_config.json`` holds ``search`` (default: the paper's).

    A shape HF cannot hold raises :class:`~transformer_nmt.export.UnsupportedModelError` before
    anything is written; an existing ``output_dir`` is replaced only with ``overwrite``. Returns
    the folder.
    """
    from transformers import AutoModelForSeq2SeqLM, MarianMTModel, PegasusForConditionalGeneration

    config, ids = checkpoint.model.config, (checkpoint.bos_id, checkpoint.eos_id, checkpoint.pad_id)
    check_huggingface_compatible(config)
    hf_tokenizer = source_eos_tokenizer(checkpoint.tokenizer, config.max_len, checkpoint.eos_id)
    model_class = MarianMTModel if config.norm == "post" else PegasusForConditionalGeneration
    hf_model = model_class(hf_model_config(config, *ids))
    missing, unexpected = hf_model.load_state_dict(hf_state_dict(checkpoint.model), strict=False)
    _check_covered(missing, unexpected, config)
    if not config.output_bias:
        hf_model.final_logits_bias.zero_()
    hf_model.generation_config = hf_generation_config(config, *ids, search or SearchOptions())
    metadata = ExportMetadata.of(checkpoint, HF_ARCHITECTURES[config.norm][0])

    def build(directory: Path) -> None:
        hf_model.save_pretrained(directory)
        hf_tokenizer.save_pretrained(directory)
        metadata.write(directory)
        (directory / "README.md").write_text(
            model_card(metadata, hf_model.generation_config), encoding="utf-8"
        )
        reloaded = AutoModelForSeq2SeqLM.from_pretrained(directory).eval()
        src, tgt_in = probe_batch(config, *ids)
        expected = our_logits(checkpoint.model, src, tgt_in)
        with torch.inference_mode():
            actual = hf_logits(reloaded, src, tgt_in, checkpoint.pad_id)
        check_same_logits(expected, actual, tgt_in, checkpoint.pad_id, "the exported HF model")

    check_export_output(output_dir, export_inputs(checkpoint), overwrite)
    size = weight_bytes(checkpoint.model)
    return write_directory_atomically(output_dir, build, overwrite=overwrite, size=size)


def hf_logits(hf_model, src_ids: Tensor, tgt_in_ids: Tensor, pad_id: int) -> Tensor:
    """Teacher-forced logits [B, T, V] of an HF seq2seq model, padding masked as ours (the
    decoder start stays visible even where it is the pad id)."""
    decoder_mask = tgt_in_ids != pad_id
    decoder_mask[:, 0] = True
    return hf_model(
        input_ids=src_ids,
        attention_mask=src_ids != pad_id,
        decoder_input_ids=tgt_in_ids,
        decoder_attention_mask=decoder_mask,
        use_cache=False,
    ).logits


def _check_covered(missing: list[str], unexpected: list[str], config: TransformerConfig) -> None:
    """Every HF weight must come from one of ours, except what HF derives itself."""
    derived = [
        key
        for key in missing
        if not key.endswith("embed_positions.weight")  # the sinusoid tables
        and key != "final_logits_bias"  # zero unless we give it
        and not (config.share_all_embeddings and key.endswith("embed_tokens.weight"))
        and not (config.tie_embeddings and key == "lm_head.weight")
    ]
    if derived or unexpected:
        raise RuntimeError(
            f"the HF model does not match our parameters: missing {derived[:5]}, unexpected "
            f"{unexpected[:5]}"
        )
