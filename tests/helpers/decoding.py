"""What the search tests share: a source row without its padding, and counted projections."""

import torch

from .tiny_model import PAD


def unpadded(src: torch.Tensor, row: int) -> torch.Tensor:
    """Row ``row`` of src alone, without its padding: [1, its length]."""
    return src[row : row + 1, : max(int((src[row] != PAD).sum()), 1)]


def count_cross_attention_projections(model, monkeypatch) -> list[int]:
    """From now on, each projection of the encoder output to cross-attention keys and values
    appends its batch size to the returned list."""
    calls = []
    for layer in model.decoder.layers:
        original = layer.cross_attention.project_key_value

        def counted(memory, original=original):
            calls.append(memory.size(0))
            return original(memory)

        monkeypatch.setattr(layer.cross_attention, "project_key_value", counted)
    return calls
