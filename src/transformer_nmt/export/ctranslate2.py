"""Export to a CTranslate2 model directory, for fast CPU (and GPU) inference, in float32 or
quantized to int8.

The model is assembled with CTranslate2's own specification classes from our modules, layer by
layer, not with a stock converter: ``pre_norm`` follows our norm (CTranslate2's post-norm is
LayerNorm(x + sublayer(x)), its pre-norm adds a final LayerNorm per stack, our ``final_norm``);
self-attention is one fused [W^Q; W^K; W^V] projection, cross-attention W^Q and a fused
[W^K; W^V]; our position table (sinusoidal or learned) is stored as is, so no permutation is
needed, and ``head_dim`` carries a d_k other than d_model / h. The directory holds
``model.bin``, ``config.json``, ``shared_vocabulary.json`` (one token per embedding row),
``tokenizer/`` (ours) and ``transformer_nmt.json``; the model appends ``</s>`` to every source
itself. Translate with it through
:class:`~transformer_nmt.evaluation.ctranslate2_translator.CTranslate2Translator`
(``translate.py engine=ct2 model_dir=…``).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import nn

from transformer_nmt.atomic import write_directory_atomically
from transformer_nmt.checkpoint import LoadedCheckpoint
from transformer_nmt.model import Transformer, TransformerConfig

from .errors import raise_if_problems
from .metadata import ExportMetadata
from .output import check_export_output, export_inputs, weight_bytes
from .verification import our_logits, probe_batch

QUANTIZATIONS = ("float32", "int8", "int8_float32")
TOKENIZER_DIR = "tokenizer"
LAYER_NORM_EPSILON = 1e-5  # torch.nn.LayerNorm's; CTranslate2's default is 1e-6
# The probe batch's per-token log-probabilities, CTranslate2's against ours: float32 must agree
# to float noise; quantized weights only on average (this catches a wrong layout, which is off
# by whole nats, not int8's rounding).
FLOAT32_TOLERANCE = 1e-3
QUANTIZED_MEAN_TOLERANCE = 0.5


def vocabulary_tokens(tokenizer, vocab_size: int) -> list[str]:
    """The token string of every embedding row: the tokenizer's by id, then a placeholder
    ``<ct2_unused_N>`` for rows no token uses."""
    tokens = tokenizer.convert_ids_to_tokens(list(range(min(len(tokenizer), vocab_size))))
    tokens += [f"<ct2_unused_{i}>" for i in range(len(tokens), vocab_size)]
    return [str(token) for token in tokens]


def check_ctranslate2_compatible(config: TransformerConfig, tokens: list[str]) -> None:
    """Raise one :class:`~transformer_nmt.export.UnsupportedModelError` naming what CTranslate2
    (or one tokenizer for both sides) cannot hold, or return."""
    problems = []
    if config.src_vocab_size != config.tgt_vocab_size:
        problems.append(
            f"src_vocab_size={config.src_vocab_size} != tgt_vocab_size={config.tgt_vocab_size} "
            f"(the export holds one tokenizer for both sides)"
        )
    if config.d_k != config.d_v:
        problems.append(f"d_k={config.d_k} != d_v={config.d_v} (CTranslate2 has one head_dim)")
    duplicates = sorted({token for token in tokens if tokens.count(token) > 1})
    if duplicates:
        problems.append(
            f"the tokenizer's strings {duplicates[:5]} stand for several ids (CTranslate2 maps "
            f"token strings to ids)"
        )
    raise_if_problems("CTranslate2", problems)


def ctranslate2_spec(model: Transformer, tokens: list[str], bos_id: int, eos_id: int):
    """A validated ``ctranslate2.specs.TransformerSpec`` holding copies of our weights."""
    from ctranslate2.specs import common_spec, transformer_spec

    config = model.config
    activation = {"relu": common_spec.Activation.RELU, "swish": common_spec.Activation.SWISH}
    options = dict(
        pre_norm=config.norm == "pre",
        rms_norm=config.norm_layer == "rmsnorm",
        activation=activation[config.activation],
        head_dim=None if config.d_k * config.n_heads == config.d_model else config.d_k,
    )
    encoder = transformer_spec.TransformerEncoderSpec(
        config.n_encoder_layers, config.n_heads, **options
    )
    decoder = transformer_spec.TransformerDecoderSpec(
        config.n_decoder_layers, config.n_heads, **options
    )
    for stack_spec, stack in ((encoder, model.encoder), (decoder, model.decoder)):
        stack_spec.scale_embeddings = True  # × √d_model, as TokenEmbedding
        stack_spec.position_encodings.encodings = _position_table(stack.positional)
        if config.norm == "pre":
            _set_layer_norm(stack_spec.layer_norm, stack.final_norm)
    encoder.embeddings[0].weight = _array(model.encoder.embedding.weight)
    decoder.embeddings.weight = _array(model.decoder.embedding.weight)
    decoder.projection.weight = _array(model.output_projection.weight)
    if model.output_projection.bias is not None:
        decoder.projection.bias = _array(model.output_projection.bias)
    for layer_spec, layer in zip(encoder.layer, model.encoder.layers, strict=True):
        norms = [residual.norm for residual in layer.residual]
        _set_attention(layer_spec.self_attention, layer.self_attention, norms[0], fused_qkv=True)
        _set_feed_forward(layer_spec.ffn, layer.feed_forward, norms[1])
    for layer_spec, layer in zip(decoder.layer, model.decoder.layers, strict=True):
        norms = [residual.norm for residual in layer.residual]
        _set_attention(layer_spec.self_attention, layer.self_attention, norms[0], fused_qkv=True)
        _set_attention(layer_spec.attention, layer.cross_attention, norms[1], fused_qkv=False)
        _set_feed_forward(layer_spec.ffn, layer.feed_forward, norms[2])

    spec = transformer_spec.TransformerSpec(encoder, decoder)
    spec.register_source_vocabulary(tokens)
    spec.register_target_vocabulary(tokens)
    spec.config.unk_token = "<unk>" if "<unk>" in tokens else tokens[0]
    spec.config.bos_token = tokens[bos_id]
    spec.config.eos_token = tokens[eos_id]
    spec.config.decoder_start_token = tokens[bos_id]
    spec.config.add_source_bos = False
    spec.config.add_source_eos = True  # our sources are ids + EOS
    spec.config.layer_norm_epsilon = LAYER_NORM_EPSILON
    spec.validate()
    return spec


def export_ctranslate2(
    checkpoint: LoadedCheckpoint,
    output_dir: Path | str,
    quantization: str = "float32",
    *,
    overwrite: bool = False,
) -> Path:
    """Write ``checkpoint``'s model as a CTranslate2 directory with ``quantization`` weights
    (``float32``, ``int8``, or ``int8_float32``: int8 weights, float32 activations).

    A shape CTranslate2 cannot hold raises :class:`~transformer_nmt.export.UnsupportedModelError`
    before anything is written. The written model's per-token log-probabilities on a probe batch
    are compared with ours before the directory is renamed into place; an existing
    ``output_dir`` is replaced only with ``overwrite``. Returns the directory.
    """
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {QUANTIZATIONS}, got {quantization!r}")
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    tokens = vocabulary_tokens(tokenizer, model.config.tgt_vocab_size)
    check_ctranslate2_compatible(model.config, tokens)
    spec = ctranslate2_spec(model, tokens, checkpoint.bos_id, checkpoint.eos_id)
    spec.optimize(quantization=quantization)
    metadata = ExportMetadata.of(checkpoint, "ctranslate2", quantization=quantization)

    def build(directory: Path) -> None:
        spec.save(str(directory))
        tokenizer.save_pretrained(directory / TOKENIZER_DIR)
        metadata.write(directory)
        check_ctranslate2_scores(checkpoint, directory, tokens, quantization)

    check_export_output(output_dir, export_inputs(checkpoint), overwrite)
    size = weight_bytes(checkpoint.model)
    return write_directory_atomically(output_dir, build, overwrite=overwrite, size=size)


def check_ctranslate2_scores(
    checkpoint: LoadedCheckpoint, directory: Path, tokens: list[str], quantization: str
) -> tuple[float, float]:
    """(largest, mean) |difference| of the per-token log-probabilities that CTranslate2's
    ``score_batch`` and our model give a probe batch; raises if out of tolerance."""
    import ctranslate2

    ids = (checkpoint.bos_id, checkpoint.eos_id, checkpoint.pad_id)
    src, tgt_in = probe_batch(checkpoint.model.config, *ids)
    log_probs = our_logits(checkpoint.model, src, tgt_in).log_softmax(dim=-1)
    bodies = [[t for t in row if t != checkpoint.pad_id][:-1] for row in src.tolist()]
    pieces = [[tokens[t] for t in body] for body in bodies]
    # CTranslate2 adds the EOS to the source, and scores the target followed by EOS.
    translator = ctranslate2.Translator(str(directory), intra_threads=torch.get_num_threads())
    results = translator.score_batch(pieces, pieces)
    differences = []
    for row, (body, result) in enumerate(zip(bodies, results, strict=True)):
        labels = torch.tensor([*body, checkpoint.eos_id])
        ours = log_probs[row, : len(labels)].gather(1, labels[:, None])[:, 0]
        differences += (ours - torch.tensor(result.log_probs)).abs().tolist()
    largest, mean = max(differences), sum(differences) / len(differences)
    failed = (
        largest > FLOAT32_TOLERANCE
        if quantization == "float32"
        else mean > QUANTIZED_MEAN_TOLERANCE
    )
    if failed or not math.isfinite(largest):
        raise RuntimeError(
            f"the CTranslate2 export ({quantization}) disagrees with our model: per-token "
            f"log-probabilities differ by up to {largest:.3g} (mean {mean:.3g}); nothing was "
            f"written"
        )
    return largest, mean


def _array(tensor: torch.Tensor) -> np.ndarray:
    """A float32 copy: CTranslate2's quantizer scales arrays in place, and a view of our
    parameters would quantize the model being exported."""
    return np.array(tensor.detach().float().cpu().numpy(), dtype=np.float32, copy=True)


def _position_table(positional: nn.Module) -> np.ndarray:
    if hasattr(positional, "encoding"):  # sinusoidal: a buffer
        return _array(positional.encoding)
    return _array(positional.embedding.weight)


def _set_linear(spec, *linears: nn.Linear) -> None:
    """One CTranslate2 linear from one or more of ours, stacked along the outputs."""
    spec.weight = np.concatenate([_array(linear.weight) for linear in linears])
    spec.bias = np.concatenate([_array(linear.bias) for linear in linears])


def _set_layer_norm(spec, norm: nn.Module) -> None:
    """LayerNorm's gain and bias, or RMSNorm's gain (it has no bias)."""
    spec.gamma = _array(norm.weight)
    if getattr(norm, "bias", None) is not None:
        spec.beta = _array(norm.bias)


def _set_attention(spec, attention, norm: nn.LayerNorm, *, fused_qkv: bool) -> None:
    """Self-attention: linear[0] = [W^Q; W^K; W^V], linear[1] = W^O. Cross-attention:
    linear[0] = W^Q, linear[1] = [W^K; W^V], linear[2] = W^O. Then the sub-layer's norm."""
    if fused_qkv:
        _set_linear(spec.linear[0], attention.w_q, attention.w_k, attention.w_v)
    else:
        _set_linear(spec.linear[0], attention.w_q)
        _set_linear(spec.linear[1], attention.w_k, attention.w_v)
    _set_linear(spec.linear[-1], attention.w_o)
    _set_layer_norm(spec.layer_norm, norm)


def _set_feed_forward(spec, feed_forward, norm: nn.LayerNorm) -> None:
    _set_linear(spec.linear_0, feed_forward.w_1)
    _set_linear(spec.linear_1, feed_forward.w_2)
    _set_layer_norm(spec.layer_norm, norm)
