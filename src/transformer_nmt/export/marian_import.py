"""The other direction: our Transformer and tokenizer from a Hugging Face Marian (opus-mt) or
Pegasus checkpoint, so that a pretrained model can be fine-tuned or evaluated with this code.

Weights are mapped with the export's table (:mod:`.hf_parameters`) and the inverse of its
hidden-unit permutation, so Marian's sines-then-cosines become our interleaved sinusoids.
Marian's swish activation and ``final_logits_bias`` map to ``activation="swish"`` and
``output_bias=True``. The tokenizer is the folder's own, loaded by the project's
:func:`~transformer_nmt.data.load_tokenizer`, whose BOS is the model's decoder start (Marian's
pad id). What our model cannot hold ends in one
:class:`~transformer_nmt.export.UnsupportedModelError`.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from transformer_nmt.checkpoint import CheckpointError, LoadedCheckpoint
from transformer_nmt.model import Transformer, TransformerConfig

from .errors import raise_if_problems
from .hf_parameters import load_hf_state_dict
from .huggingface import hf_logits
from .metadata import ExportMetadata
from .verification import check_same_logits, our_logits, probe_batch

log = logging.getLogger(__name__)

NORMS = {"marian": "post", "pegasus": "pre"}  # HF model_type -> our norm
ACTIVATIONS = {"relu": "relu", "swish": "swish", "silu": "swish"}  # HF name -> ours


def config_from_hf(hf_config, output_bias: bool) -> TransformerConfig:
    """Our :class:`TransformerConfig` for a Marian / Pegasus config; one
    :class:`~transformer_nmt.export.UnsupportedModelError` names whatever ours cannot hold."""
    model_type = getattr(hf_config, "model_type", None)
    target = "this project's Transformer"
    if model_type not in NORMS:
        raise_if_problems(
            target, [f"model_type={model_type!r} (only {sorted(NORMS)} models can be imported)"]
        )
    problems = []
    if hf_config.activation_function not in ACTIVATIONS:
        problems.append(
            f"activation_function={hf_config.activation_function!r} (the feed-forward network "
            f"has {sorted(set(ACTIVATIONS.values()))})"
        )
    if not hf_config.scale_embedding:
        problems.append("scale_embedding=False (our embeddings are multiplied by √d_model, §3.4)")
    for ours, (encoder_field, decoder_field) in {
        "n_heads": ("encoder_attention_heads", "decoder_attention_heads"),
        "d_ff": ("encoder_ffn_dim", "decoder_ffn_dim"),
    }.items():
        encoder_value = getattr(hf_config, encoder_field)
        decoder_value = getattr(hf_config, decoder_field)
        if encoder_value != decoder_value:
            problems.append(
                f"{encoder_field}={encoder_value} != {decoder_field}={decoder_value} (our "
                f"config has one {ours} for both stacks)"
            )
    raise_if_problems(target, problems)
    if getattr(hf_config, "activation_dropout", 0.0):
        log.warning(
            "activation_dropout=%s is left out: our feed-forward network has no inner dropout",
            hf_config.activation_dropout,
        )
    shared = model_type == "pegasus" or bool(hf_config.share_encoder_decoder_embeddings)
    return TransformerConfig(
        src_vocab_size=hf_config.vocab_size,
        tgt_vocab_size=hf_config.vocab_size
        if shared
        else (getattr(hf_config, "decoder_vocab_size", None) or hf_config.vocab_size),
        pad_id=hf_config.pad_token_id,
        d_model=hf_config.d_model,
        n_heads=hf_config.encoder_attention_heads,
        n_layers=hf_config.encoder_layers,
        n_encoder_layers=hf_config.encoder_layers,
        n_decoder_layers=hf_config.decoder_layers,
        d_ff=hf_config.encoder_ffn_dim,
        activation=ACTIVATIONS[hf_config.activation_function],
        dropout=float(hf_config.dropout),
        attention_dropout=float(hf_config.attention_dropout),
        norm=NORMS[model_type],
        positional="sinusoidal",
        max_len=hf_config.max_position_embeddings,
        share_all_embeddings=shared,
        tie_embeddings=bool(hf_config.tie_word_embeddings),
        output_bias=output_bias,
    )


def import_marian(
    name_or_dir: str | Path, *, src_lang: str | None = None, tgt_lang: str | None = None
) -> LoadedCheckpoint:
    """Our model (eval mode) and tokenizer from a Marian / Pegasus Hub id or local folder.

    Offline, a Hub id must be in the Hugging Face cache already. The languages come from the
    arguments, else the folder's ``transformer_nmt.json`` (our own exports), else the tokenizer's
    ``source_lang`` / ``target_lang``, else "src" / "tgt". The imported model's logits are
    checked against the HF model's before it is returned.
    """
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    from transformer_nmt.data import DataError, load_tokenizer

    name = str(name_or_dir)
    try:
        hf_config = AutoConfig.from_pretrained(name)
        config_from_hf(hf_config, output_bias=False)  # refuse before loading any weight
        hf_model = AutoModelForSeq2SeqLM.from_pretrained(name).eval()
        tokenizer = load_tokenizer(name)
    except (OSError, DataError) as error:
        raise CheckpointError(
            f"cannot load the Hugging Face model {name!r}: {error}. Offline it must be a local "
            f"folder, or already be in the Hugging Face cache"
        ) from error
    output_bias = bool(hf_model.final_logits_bias.abs().max() > 0)
    model = Transformer(config_from_hf(hf_config, output_bias))
    problems = load_hf_state_dict(model, hf_model.state_dict())
    raise_if_problems("this project's Transformer", problems)
    model.eval()

    ids = (hf_config.decoder_start_token_id, hf_config.eos_token_id, hf_config.pad_token_id)
    src, tgt_in = probe_batch(model.config, *ids)
    actual = our_logits(model, src, tgt_in)
    with torch.inference_mode():
        expected = hf_logits(hf_model, src, tgt_in, hf_config.pad_token_id)
    check_same_logits(expected, actual, tgt_in, hf_config.pad_token_id, f"the import of {name}")

    recorded = ExportMetadata.read(name) if Path(name).is_dir() else None
    src_lang = src_lang or (recorded and recorded.src_lang) or getattr(tokenizer, "source_lang", 0)
    tgt_lang = tgt_lang or (recorded and recorded.tgt_lang) or getattr(tokenizer, "target_lang", 0)
    hyper_parameters = {
        "model_config": model.config.to_dict(),
        "tokenizer_dir": name,
        "src_lang": src_lang or "src",
        "tgt_lang": tgt_lang or "tgt",
        "bos_id": ids[0],
        "eos_id": ids[1],
        "pad_id": ids[2],
    }
    return LoadedCheckpoint(
        path=Path(name),
        model=model,
        tokenizer=tokenizer,
        tokenizer_dir=name,
        src_lang=hyper_parameters["src_lang"],
        tgt_lang=hyper_parameters["tgt_lang"],
        bos_id=ids[0],
        eos_id=ids[1],
        pad_id=ids[2],
        hyper_parameters=hyper_parameters,
    )
