"""Attention maps of a model: the weights of every attention module for teacher-forced sentence
pairs, per kind, and heatmaps of them with the tokens on the axes.

The kinds are the paper's three uses of attention (§3.2.3): ``encoder_self`` (keys and queries
from the source), ``decoder_self`` (masked: a target position sees itself and those before it)
and ``cross`` (target queries, source keys: what the decoder reads when it predicts a token).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from transformer_nmt.model import Transformer

KINDS = ("encoder_self", "decoder_self", "cross")
MAPS_FILE = "maps.npz"
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


def draw_attention(
    ax,
    weights: Tensor | np.ndarray,
    queries: Sequence[str] | None,
    keys: Sequence[str] | None,
    title: str,
    vmax: float = 1.0,
):
    """A heatmap of one map [T_q, T_k] on a matplotlib ``ax``: keys along x (labels turned
    upright), queries down y (None: no labels on that axis), colours from 0 to ``vmax``."""
    weights = np.asarray(weights)
    ax.imshow(weights, cmap="viridis", vmin=0.0, vmax=vmax, aspect="auto")
    fontsize = _token_fontsize(max(weights.shape))
    if keys is None:
        ax.set_xticks([])
    else:
        ax.set_xticks(range(len(keys)), keys, rotation=90, fontsize=fontsize)
    if queries is None:
        ax.set_yticks([])
    else:
        ax.set_yticks(range(len(queries)), queries, fontsize=fontsize)
    ax.tick_params(length=0, pad=1)
    ax.set_title(title, fontsize=8)


def attention_figure(
    panels: Sequence[tuple[str, Tensor | np.ndarray]],
    queries: Sequence[str],
    keys: Sequence[str],
    title: str,
    columns: int = 4,
):
    """A figure of heatmaps, one per (title, map [T_q, T_k]), ``columns`` to a row, on one
    colour scale from 0 to the largest weight shown (named in the title, so that an early,
    nearly uniform map is still visible); token labels on the outer axes only.

    A ``matplotlib.figure.Figure`` (not pyplot: the caller's backend is left alone), sized so
    that every token label stays readable.
    """
    from matplotlib.figure import Figure

    columns = min(columns, len(panels))
    rows = -(-len(panels) // columns)
    vmax = max(float(np.asarray(weights).max()) for _, weights in panels) or 1.0
    # A fixed layout in inches (tight_layout would draw the figure twice): label margins from
    # the longest token, panels from the number of tokens, a title line above each panel.
    length = max(len(queries), len(keys))
    fontsize = _token_fontsize(length)
    margin = max(map(len, [*queries, *keys])) * fontsize * 0.6 / 72 + 0.15
    panel, gap, title_height = max(0.13 * length, 1.2), 0.15, 0.25
    width = margin + columns * panel + (columns - 1) * gap + 0.1
    height = 0.35 + rows * (title_height + panel) + margin
    figure = Figure(figsize=(width, height), dpi=100)
    figure.subplots_adjust(
        left=margin / width,
        right=1 - 0.1 / width,
        bottom=margin / height,
        top=1 - (0.35 + title_height) / height,
        wspace=gap / panel,
        hspace=title_height / panel,
    )
    axes = figure.subplots(rows, columns, squeeze=False)
    for index, (panel_title, weights) in enumerate(panels):
        row, column = divmod(index, columns)
        below = index + columns < len(panels)  # a panel under this one shows the key labels
        shown_queries = queries if column == 0 else None
        draw_attention(axes[row, column], weights, shown_queries, None if below else keys,
                       panel_title, vmax)  # fmt: skip
    for ax in axes.flat[len(panels) :]:
        ax.set_axis_off()
    figure.suptitle(f"{title} (colour: 0 to {vmax:.2f})", fontsize=9, y=1 - 0.05 / height, va="top")
    return figure


def _token_fontsize(length: int) -> int:
    return 7 if length <= 24 else 6


def attention_views(
    kind: str, weights: np.ndarray, src_tokens: Sequence[str], tgt_tokens: Sequence[str], step: int
) -> dict:
    """The two figures of one kind's maps [layers, heads, T_q, T_k]: ``"mean"``, every layer
    averaged over heads, and ``"heads"``, every head of the last layer."""
    queries, keys = query_and_key_tokens(kind, src_tokens, tgt_tokens)
    name, last = kind.replace("_", " "), len(weights) - 1
    layers = [(f"layer {i}", layer.mean(0)) for i, layer in enumerate(weights)]
    heads = [(f"head {h}", head) for h, head in enumerate(weights[last])]
    return {
        "mean": attention_figure(layers, queries, keys, f"{name}, mean over heads @ step {step}"),
        "heads": attention_figure(heads, queries, keys, f"{name}, layer {last} @ step {step}"),
    }


def png_bytes(figure) -> tuple[bytes, int, int]:
    """The figure as PNG bytes, with its height and width in pixels."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image

    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    rgb = np.asarray(canvas.buffer_rgba())[..., :3]
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, format="png", compress_level=1)
    return buffer.getvalue(), rgb.shape[0], rgb.shape[1]


@dataclass
class SentenceMaps:
    """One sentence pair's tokens and maps ``{kind: [layers, heads, T_q, T_k]}``."""

    src_tokens: list[str]
    tgt_tokens: list[str]
    maps: dict[str, np.ndarray]


def record_attention(
    directory: Path, step: int, sentences: Sequence[SentenceMaps]
) -> list[tuple[str, Path, bytes, int, int]]:
    """Write a validation's maps into a run's ``directory``: every view of every sentence as
    ``step_<step>/sentence_<i>_<kind>_<mean|heads>.png`` and the maps themselves as
    ``maps.npz`` (the latest step's; :func:`load_attention_maps` reads it), each atomically.

    Returns (``sentence_<i>/<kind>_<view>``, path, PNG bytes, height, width) per image.
    """
    from transformer_nmt.atomic import write_file_atomically

    written = []
    for index, sentence in enumerate(sentences):
        for kind, weights in sentence.maps.items():
            views = attention_views(kind, weights, sentence.src_tokens, sentence.tgt_tokens, step)
            for view, figure in views.items():
                png, height, width = png_bytes(figure)
                path = directory / f"step_{step:06d}" / f"sentence_{index}_{kind}_{view}.png"
                write_file_atomically(path, lambda handle, png=png: handle.write(png), binary=True)
                written.append((f"sentence_{index}/{kind}_{view}", path, png, height, width))
    save_attention_maps(directory / MAPS_FILE, step, sentences)
    return written


def save_attention_maps(path: Path, step: int, sentences: Sequence[SentenceMaps]) -> None:
    """Write the sentences' maps and tokens, and the step, to ``path`` (``.npz``) atomically."""
    from transformer_nmt.atomic import write_file_atomically

    arrays = {"step": np.array(step)}
    for index, sentence in enumerate(sentences):
        arrays[f"sentence_{index}.source"] = np.array(sentence.src_tokens)
        arrays[f"sentence_{index}.target"] = np.array(sentence.tgt_tokens)
        for kind, weights in sentence.maps.items():
            arrays[f"sentence_{index}.{kind}"] = weights
    write_file_atomically(path, lambda handle: np.savez(handle, **arrays), binary=True)


def load_attention_maps(path: Path) -> tuple[int, list[SentenceMaps]]:
    """(step, sentences) of a ``maps.npz`` that :func:`save_attention_maps` wrote."""
    with np.load(path) as arrays:
        count = sum(1 for key in arrays.files if key.endswith(".source"))
        sentences = []
        for index in range(count):
            prefix = f"sentence_{index}."
            maps = {
                key.removeprefix(prefix): arrays[key]
                for key in arrays.files
                if key.startswith(prefix) and key.removeprefix(prefix) in KINDS
            }
            source, target = arrays[prefix + "source"], arrays[prefix + "target"]
            sentences.append(SentenceMaps(list(map(str, source)), list(map(str, target)), maps))
        return int(arrays["step"]), sentences
