"""Which Marian / Pegasus parameter holds each of ours, and the hidden-unit permutation between
our sinusoids and theirs.

Our positional encoding interleaves sines and cosines (PE[:, 0::2] = sin, PE[:, 1::2] = cos, the
paper's formula); Marian and Pegasus put every sine first, then every cosine, with the same
frequencies, and rebuild that table when they load (it is not saved). Permuting every
hidden-sized axis of every weight the same way gives a model that computes our function under
their table: LayerNorm, residual sums and dot products do not depend on the order of the hidden
units. The export permutes with :func:`halves_order`, the import with its inverse.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from transformer_nmt.model import Transformer, TransformerConfig


@dataclass(frozen=True)
class ParameterPair:
    """One of our parameters and the HF parameter holding it; ``hidden_axes`` are its axes of
    size d_model (permuted). ``row`` marks HF's [1, V] ``final_logits_bias`` for our [V] bias."""

    ours: str
    theirs: str
    hidden_axes: tuple[int, ...]
    row: bool = False


def halves_order(d_model: int) -> Tensor:
    """HF's hidden index j holds our hidden index ``order[j]``: ``theirs = ours[..., order]``,
    ``ours = theirs[..., order.argsort()]``."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def parameter_map(config: TransformerConfig) -> list[ParameterPair]:
    """Every parameter of our model with its Marian / Pegasus name (a shared embedding appears
    once per HF copy). HF keeps its sinusoid tables itself."""
    pairs = []
    if config.share_all_embeddings:
        shared = ParameterPair("encoder.embedding.embedding.weight", "model.shared.weight", (1,))
        pairs.append(shared)
    if not config.share_all_embeddings or not config.tie_embeddings:
        # Untied from lm_head, transformers 5 also unties embed_tokens from model.shared (all of
        # a model's tied keys follow tie_word_embeddings), so each copy must be given.
        for stack in ("encoder", "decoder"):
            ours = "encoder" if config.share_all_embeddings else stack
            pairs.append(
                ParameterPair(
                    f"{ours}.embedding.embedding.weight", f"model.{stack}.embed_tokens.weight", (1,)
                )
            )
    if not config.tie_embeddings:
        pairs.append(ParameterPair("output_projection.weight", "lm_head.weight", (1,)))
    if config.output_bias:
        pairs.append(ParameterPair("output_projection.bias", "final_logits_bias", (), row=True))
    for i in range(config.n_encoder_layers):
        ours, theirs = f"encoder.layers.{i}", f"model.encoder.layers.{i}"
        pairs += _attention(f"{ours}.self_attention", f"{theirs}.self_attn")
        pairs += _layer_norm(f"{ours}.residual.0.norm", f"{theirs}.self_attn_layer_norm")
        pairs += _feed_forward(f"{ours}.feed_forward", theirs)
        pairs += _layer_norm(f"{ours}.residual.1.norm", f"{theirs}.final_layer_norm")
    for i in range(config.n_decoder_layers):
        ours, theirs = f"decoder.layers.{i}", f"model.decoder.layers.{i}"
        pairs += _attention(f"{ours}.self_attention", f"{theirs}.self_attn")
        pairs += _layer_norm(f"{ours}.residual.0.norm", f"{theirs}.self_attn_layer_norm")
        pairs += _attention(f"{ours}.cross_attention", f"{theirs}.encoder_attn")
        pairs += _layer_norm(f"{ours}.residual.1.norm", f"{theirs}.encoder_attn_layer_norm")
        pairs += _feed_forward(f"{ours}.feed_forward", theirs)
        pairs += _layer_norm(f"{ours}.residual.2.norm", f"{theirs}.final_layer_norm")
    if config.norm == "pre":
        pairs += _layer_norm("encoder.final_norm", "model.encoder.layer_norm")
        pairs += _layer_norm("decoder.final_norm", "model.decoder.layer_norm")
    return pairs


def hf_state_dict(model: Transformer) -> dict[str, Tensor]:
    """Our weights under HF names, their hidden axes in HF's order (float32 copies on the CPU)."""
    ours = model.state_dict()
    order = halves_order(model.config.d_model)
    state = {}
    for pair in parameter_map(model.config):
        value = _permute(ours[pair.ours].detach().float().cpu(), pair.hidden_axes, order)
        state[pair.theirs] = value[None] if pair.row else value
    return state


def load_hf_state_dict(model: Transformer, theirs: dict[str, Tensor]) -> list[str]:
    """Copy HF weights into ``model``, hidden axes back in our order. Returns the problems: HF
    copies of one of our shared parameters that differ (trained apart)."""
    inverse = halves_order(model.config.d_model).argsort()
    parameters = dict(model.named_parameters())
    first_source: dict[str, str] = {}
    problems = []
    with torch.no_grad():
        for pair in parameter_map(model.config):
            value = _permute(theirs[pair.theirs].float(), pair.hidden_axes, inverse)
            value = value[0] if pair.row else value
            if pair.ours in first_source:
                if not torch.equal(parameters[pair.ours], value):
                    problems.append(
                        f"{pair.theirs} differs from {first_source[pair.ours]}: our model has one "
                        f"matrix for both (share_all_embeddings), and these were trained apart"
                    )
                continue
            first_source[pair.ours] = pair.theirs
            parameters[pair.ours].copy_(value)
    return problems


def _permute(tensor: Tensor, axes: tuple[int, ...], order: Tensor) -> Tensor:
    for axis in axes:
        tensor = tensor.index_select(axis, order)
    return tensor


def _linear(ours: str, theirs: str, hidden_in: bool, hidden_out: bool) -> Iterator[ParameterPair]:
    weight_axes = ((0,) if hidden_out else ()) + ((1,) if hidden_in else ())
    yield ParameterPair(f"{ours}.weight", f"{theirs}.weight", weight_axes)
    yield ParameterPair(f"{ours}.bias", f"{theirs}.bias", (0,) if hidden_out else ())


def _layer_norm(ours: str, theirs: str) -> Iterator[ParameterPair]:
    yield ParameterPair(f"{ours}.weight", f"{theirs}.weight", (0,))
    yield ParameterPair(f"{ours}.bias", f"{theirs}.bias", (0,))


def _attention(ours: str, theirs: str) -> Iterator[ParameterPair]:
    for mine, hf in (("w_q", "q_proj"), ("w_k", "k_proj"), ("w_v", "v_proj")):
        yield from _linear(f"{ours}.{mine}", f"{theirs}.{hf}", hidden_in=True, hidden_out=False)
    yield from _linear(f"{ours}.w_o", f"{theirs}.out_proj", hidden_in=False, hidden_out=True)


def _feed_forward(ours: str, theirs: str) -> Iterator[ParameterPair]:
    yield from _linear(f"{ours}.w_1", f"{theirs}.fc1", hidden_in=True, hidden_out=False)
    yield from _linear(f"{ours}.w_2", f"{theirs}.fc2", hidden_in=False, hidden_out=True)
