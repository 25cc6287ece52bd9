"""Key/value cache for incremental (one token at a time) decoding."""

from __future__ import annotations

import torch
from torch import Tensor

from .attention import MultiHeadAttention

KeyValue = tuple[Tensor, Tensor]


class KVCache:
    """Per decoder layer: self-attention keys/values of the steps decoded so far, which grow by
    one step per call, and cross-attention keys/values of the encoder memory, computed once.

    Decoding hands it to :meth:`~transformer_nmt.model.Transformer.decode` with k ≥ 1
    consecutive target rows per source (beam search's k hypotheses; k = 1 otherwise) and the
    memory once per source. Self-attention keys are [B·k, h, length, d_k] and values
    [B·k, h, length, d_v], one row per hypothesis; cross-attention keys/values are
    [B, h, S, d_k|d_v], one row per source, shared by its k hypotheses. ``reorder`` follows
    beam search's choice of parents; ``select_sources`` drops the sources whose translations
    are finished.
    """

    def __init__(self, n_layers: int) -> None:
        self.self_attention: list[KeyValue | None] = [None] * n_layers
        self.cross_attention: list[KeyValue | None] = [None] * n_layers

    @property
    def length(self) -> int:
        """Number of target positions already decoded."""
        first = self.self_attention[0]
        return 0 if first is None else first[0].size(2)

    def append_self(self, layer: int, key: Tensor, value: Tensor) -> KeyValue:
        """Append this step's keys/values to layer's cache; return all of them."""
        past = self.self_attention[layer]
        if past is not None:
            key = torch.cat([past[0], key], dim=2)
            value = torch.cat([past[1], value], dim=2)
        self.self_attention[layer] = (key, value)
        return key, value

    def cross_attend(
        self,
        layer: int,
        attention: MultiHeadAttention,
        queries: Tensor,
        memory: Tensor,
        mask: Tensor,
    ) -> Tensor:
        """Cross-attention of ``layer``: queries [B·k, T, d_model] attend to memory
        [B, S, d_model], whose keys and values are projected on first use and kept.

        Rows i·k … i·k + k - 1 of the queries (the k hypotheses of source i) attend to one copy
        of source i's keys and values, as one row of k·T queries.
        """
        if self.cross_attention[layer] is None:
            self.cross_attention[layer] = attention.project_key_value(memory)
        key, value = self.cross_attention[layer]
        rows, length, width = queries.shape
        sources = key.size(0)
        if rows % sources:
            raise ValueError(
                f"{rows} target rows cannot share {sources} sources: give each source the same "
                f"number k of consecutive target rows (B·k rows for B)"
            )
        grouped = queries.reshape(sources, -1, width)  # [B, k·T, d_model]
        return attention.attend(grouped, key, value, mask).view(rows, length, width)

    def reorder(self, index: Tensor) -> None:
        """Keep hypothesis rows ``index`` of the self-attention cache, in that order (beam
        search: the surviving hypotheses' parents)."""
        _select_rows(self.self_attention, index)

    def select_sources(self, index: Tensor) -> None:
        """Keep source rows ``index`` of the cross-attention cache."""
        _select_rows(self.cross_attention, index)


def _select_rows(entries: list[KeyValue | None], index: Tensor) -> None:
    for i, kv in enumerate(entries):
        if kv is not None:
            entries[i] = (kv[0].index_select(0, index), kv[1].index_select(0, index))
