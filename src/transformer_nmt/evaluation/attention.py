"""Attention maps of a model: the weights of every attention module for teacher-forced sentence
pairs, per kind, and heatmaps of them with the tokens on the axes.

The kinds are the paper's three uses of attention (§3.2.3): ``encoder_self`` (keys and queries
from the source), ``decoder_self`` (masked: a target position sees itself and those before it)
and ``cross`` (target queries, source keys: what the decoder reads when it predicts a token).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from transformer_nmt.model import Transformer

KINDS = ("encoder_self", "decoder_self", "cross")
# kind -> (stack, attribute of its layers)
_MODULES = {
    "encoder_self": ("encoder", "self_attention"),
    "decoder_self": ("decoder", "self_attention"),
    "cross": ("decoder", "cross_attention"),
}


def attention_maps(
    model: Transformer, src_ids: Tensor, tgt_in_ids: Tensor, kinds: Sequence[str] = KINDS
) -> dict[str, Tensor]:
    """Teacher-force a batch and return, per kind, the weights [B, layers, heads, T_q, T_k].

    ``src_ids`` [B, S] (ids + EOS, padded with ``model.config.pad_id``) and ``tgt_in_ids`` [B, T]
    (the decoder's input: BOS + ids, padded). Queries × keys are S × S for ``encoder_self``,
    T × T for ``decoder_self`` and T × S for ``cross``. Every row sums to 1 (softmax over keys),
    padded key columns are 0, and ``decoder_self`` is 0 above the diagonal. The maps are those
    of the weights the model computes with: an ``attention="sdpa"`` model's are taken on the
    explicit path, the same maths (``Transformer.capture_attention``). The model runs in eval
    mode (no dropout) without gradients and is left in the mode it was in; the maps are float32
    on the CPU.
    """
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown attention kind(s) {unknown}; choose from {list(KINDS)}")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), model.capture_attention() as captured:
            model.forward_hidden(src_ids, tgt_in_ids)
    finally:
        model.train(was_training)
    maps = {}
    for kind in kinds:
        stack, attribute = _MODULES[kind]
        layers = len(getattr(model, stack).layers)
        names = [f"{stack}.layers.{i}.{attribute}" for i in range(layers)]
        maps[kind] = torch.stack([captured[name].float().cpu() for name in names], dim=1)
    return maps


def attention_for_pair(
    model: Transformer, src_ids: Tensor, tgt_in_ids: Tensor, kinds: Sequence[str] = KINDS
) -> dict[str, Tensor]:
    """One sentence pair's maps: ``{kind: Tensor[layers, heads, T_q, T_k]}``.

    ``src_ids`` [S] are the source ids + EOS, ``tgt_in_ids`` [T] the decoder's input (BOS + the
    target or a translation), unpadded, on the model's device; see :func:`attention_maps` for
    what the maps hold. ``cross[-1].mean(0)`` is the last decoder layer's cross-attention
    averaged over heads: row t shows which source tokens the decoder read to predict target
    token t + 1.
    """
    maps = attention_maps(model, src_ids[None], tgt_in_ids[None], kinds)
    return {kind: weights[0] for kind, weights in maps.items()}


def query_and_key_tokens(
    kind: str, src_tokens: Sequence[str], tgt_tokens: Sequence[str]
) -> tuple[Sequence[str], Sequence[str]]:
    """The (query, key) token labels of a map of ``kind``."""
    return {
        "encoder_self": (src_tokens, src_tokens),
        "decoder_self": (tgt_tokens, tgt_tokens),
        "cross": (tgt_tokens, src_tokens),
    }[kind]


def draw_attention(ax, weights: Tensor, queries: Sequence[str], keys: Sequence[str], title: str):
    """A heatmap of one map [T_q, T_k] on a matplotlib ``ax``: keys along x (labels turned
    upright), queries down y, the colour scale fixed to [0, 1]."""
    ax.imshow(weights.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    fontsize = 7 if max(len(queries), len(keys)) <= 30 else 5
    ax.set_xticks(range(len(keys)), keys, rotation=90, fontsize=fontsize)
    ax.set_yticks(range(len(queries)), queries, fontsize=fontsize)
    ax.tick_params(length=0)
    ax.set_title(title, fontsize=8)


def attention_figure(
    panels: Sequence[tuple[str, Tensor]],
    queries: Sequence[str],
    keys: Sequence[str],
    title: str,
    columns: int = 4,
):
    """A figure of heatmaps, one per (title, map [T_q, T_k]), ``columns`` to a row.

    A ``matplotlib.figure.Figure`` (not pyplot: the caller's backend is left alone), sized so
    that every token label stays readable.
    """
    from matplotlib.figure import Figure

    columns = min(columns, len(panels))
    rows = -(-len(panels) // columns)
    cell = 0.16 * max(len(queries), len(keys)) + 1.2  # inches per panel: ~labels' height
    figure = Figure(figsize=(cell * columns, cell * rows + 0.4))
    axes = figure.subplots(rows, columns, squeeze=False)
    for ax, (panel_title, weights) in zip(axes.flat, panels, strict=False):
        draw_attention(ax, weights, queries, keys, panel_title)
    for ax in axes.flat[len(panels) :]:
        ax.set_axis_off()
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    return figure
