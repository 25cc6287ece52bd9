"""Every head's attention for one source and one output, by teacher forcing
(:func:`~transformer_nmt.evaluation.attention.attention_for_pair`), and its interactive heatmap.

The output is fed to the decoder as BOS + output tokens; the position that reads token t_i
predicts t_(i+1), so decoder rows are labelled by the token each position predicts (the output
tokens, then EOS when the output ended with one) and decoder self-attention's columns by what
the decoder reads (BOS, then the output tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# the kinds as the page lists them (evaluation.attention.KINDS), cross-attention first
KINDS = ("cross", "encoder_self", "decoder_self")
MEAN_OVER_HEADS = "mean"


@dataclass(frozen=True)
class AttentionMaps:
    """Weights per kind, as [layers, heads, queries, keys], and the tokens on each axis."""

    weights: dict[str, np.ndarray]
    source_tokens: list[str]  # the encoder's input: source tokens + EOS
    decoder_input_tokens: list[str]  # BOS + output tokens
    predicted_tokens: list[str]  # what each decoder position predicts: output tokens (+ EOS)

    @property
    def n_layers(self) -> dict[str, int]:
        return {kind: weights.shape[0] for kind, weights in self.weights.items()}

    @property
    def n_heads(self) -> int:
        return next(iter(self.weights.values())).shape[1]

    def axes(self, kind: str) -> tuple[list[str], list[str]]:
        """(query tokens, key tokens) of a kind: its heatmap's rows and columns."""
        if kind == "encoder_self":
            return self.source_tokens, self.source_tokens
        if kind == "cross":
            return self.predicted_tokens, self.source_tokens
        return self.predicted_tokens, self.decoder_input_tokens

    def select(self, kind: str, layer: int, head: int | str) -> np.ndarray:
        """[queries, keys] of one head (0-based), or the mean over heads (``"mean"``)."""
        weights = self.weights[kind][layer]
        return weights.mean(axis=0) if head == MEAN_OVER_HEADS else weights[int(head)]


def heatmap(maps: AttentionMaps, kind: str, layer: int, head: int | str):
    """A plotly heatmap of one head (or the mean over heads): queries as rows, keys as columns,
    each axis labelled with its tokens; hovering shows the token pair and the weight."""
    import plotly.graph_objects as go

    weights = maps.select(kind, layer, head)
    rows, columns = ([_escaped(token) for token in axis] for axis in maps.axes(kind))
    pairs = [[(query, key) for key in columns] for query in rows]
    which = "mean over heads" if head == MEAN_OVER_HEADS else f"head {int(head) + 1}"
    name = kind.replace("_", " ")
    figure = go.Figure(
        go.Heatmap(
            z=weights,
            x=list(range(len(columns))),
            y=list(range(len(rows))),
            customdata=pairs,
            hovertemplate="%{customdata[0]} → %{customdata[1]}<br>weight %{z:.3f}<extra></extra>",
            colorscale="Viridis",
            zmin=0.0,
            zmax=1.0,
        )
    )
    cell = 24
    figure.update_layout(
        title=dict(text=f"{name} attention, layer {layer + 1}, {which}", x=0.01, y=0.99),
        xaxis=dict(tickvals=list(range(len(columns))), ticktext=columns, tickangle=-60,
                   title=_KEY_AXIS[kind]),
        yaxis=dict(tickvals=list(range(len(rows))), ticktext=rows, autorange="reversed",
                   title=_QUERY_AXIS[kind]),
        height=max(360, 160 + cell * len(rows)),
        margin=dict(l=10, r=10, t=40, b=10),
    )  # fmt: skip
    return figure


def _escaped(token: str) -> str:
    """A token as plotly's labels show it literally (they read ``<…>`` as markup: ``</s>``)."""
    return token.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_QUERY_AXIS = {"cross": "output token", "encoder_self": "source token",
               "decoder_self": "output token"}  # fmt: skip
_KEY_AXIS = {"cross": "source token", "encoder_self": "source token",
             "decoder_self": "decoder input"}  # fmt: skip
