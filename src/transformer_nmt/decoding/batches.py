"""Id lists of any lengths into padded batches of similar lengths, and back into input order."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor


def longest_first(lengths: Sequence[int], batch_size: int) -> Iterator[list[int]]:
    """Indices of ``lengths``, longest first, in chunks of ``batch_size``: batches of similar
    lengths, so little padding."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    for start in range(0, len(order), batch_size):
        yield order[start : start + batch_size]


def padded(rows: Sequence[Sequence[int]], pad_id: int, device: torch.device | str) -> Tensor:
    """The id lists as one [len(rows), longest] tensor, padded with ``pad_id`` on the right."""
    width = max((len(row) for row in rows), default=0)
    batch = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for i, row in enumerate(rows):
        batch[i, : len(row)] = torch.as_tensor(row, dtype=torch.long)
    return batch.to(device)


def check_lengths(rows: Sequence[Sequence[int]], max_len: int, what: str) -> None:
    """Refuse id lists longer than the model's ``max_len`` positions, naming the first."""
    too_long = [i for i, ids in enumerate(rows) if len(ids) > max_len]
    if too_long:
        raise ValueError(
            f"{len(too_long)} {what}(s) are longer than the model's max_len={max_len} tokens "
            f"(first: #{too_long[0]} with {len(rows[too_long[0]])}); truncate them first"
        )
