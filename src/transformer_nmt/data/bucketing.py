"""Batching: token-budget batches from length buckets, sharded across DDP ranks, and padding.

Lightning facts this module relies on (checked in lightning 2.6 ``fabric/utilities/data.py``
``_set_sampler_epoch`` and ``pytorch/loops/fit_loop.py``): at the start of every training epoch
Lightning calls ``set_epoch`` on ``dataloader.sampler`` and on ``dataloader.batch_sampler.sampler``
but never on the batch sampler itself, so :class:`TokenBucketBatchSampler` exposes itself as its
own ``sampler``. Lightning checkpoints a train dataloader's ``state_dict()`` (and restores it
before creating the epoch's iterator) only if the *dataloader* has ``state_dict`` /
``load_state_dict``, which :class:`ResumableDataLoader` adds.
"""

from __future__ import annotations

import gc
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler

from transformer_nmt.data.encoding import ExampleBatch
from transformer_nmt.host_memory import release_free_memory
from transformer_nmt.private_api import batches_yielded

log = logging.getLogger(__name__)


class TokenBucketBatchSampler(Sampler[list[int]]):
    """Batches of dataset indices for one DDP rank, rebuilt from ``(seed, epoch)`` each epoch.

    With ``bucket_by_length`` the indices are shuffled (if ``shuffle``) and then stably sorted by
    length (ties by ``tiebreak_lengths`` if given, e.g. source lengths when ``lengths`` is the
    longer side), so equal lengths come in a fresh random order each epoch; consecutive runs of that
    order become batches of at most ``max_tokens`` padded tokens (sentences x longest length)
    and at most ``max_sentences`` sentences; finally the batch order is shuffled. Without
    bucketing (``max_tokens`` must then be None) batches are ``max_sentences`` consecutive
    indices of the (shuffled) order, like a plain ``DataLoader(shuffle=True)``.

    Every rank builds the same global batch list and takes every ``world_size``-th batch. The
    list is first made a multiple of ``world_size`` long by splitting its largest batches, so
    each example appears exactly once per epoch on exactly one rank and all ranks get the same
    number of batches; only with fewer examples than that needs are batches repeated.
    The number of batches does not depend on the epoch.
    """

    def __init__(
        self,
        lengths: Sequence[int] | np.ndarray,
        *,
        tiebreak_lengths: Sequence[int] | np.ndarray | None = None,
        max_tokens: int | None = None,
        max_sentences: int | None = None,
        bucket_by_length: bool = True,
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        # 4 bytes per example, every rank; an int32 array (the data module's) is used, not copied
        self.lengths = np.asarray(lengths, dtype=np.int32)
        self.tiebreak_lengths = None if tiebreak_lengths is None else np.asarray(tiebreak_lengths)
        if max_tokens is None and max_sentences is None:
            raise ValueError("give max_tokens or max_sentences (or both)")
        if max_tokens is not None and not bucket_by_length:
            raise ValueError("max_tokens needs bucket_by_length=True")
        if len(self.lengths) and self.lengths.min() < 1:
            raise ValueError("every example must be at least one token long")
        if max_tokens is not None and len(self.lengths) and self.lengths.max() > max_tokens:
            raise ValueError(
                f"an example of {self.lengths.max()} tokens exceeds max_tokens={max_tokens}"
            )
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
        self.max_tokens = max_tokens
        self.max_sentences = max_sentences
        self.bucket_by_length = bucket_by_length
        self.shuffle = shuffle
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.epoch = 0
        self._resume: tuple[int, int] | None = None  # (epoch, batches to skip) after a restore
        self._iteration: tuple[int, int] = (0, 0)  # (epoch, batches skipped) of the running pass
        # every rank gets the same number: the global list is a multiple of world_size long
        self._num_batches = len(self.global_batches(0)) // world_size

    @property
    def sampler(self) -> TokenBucketBatchSampler:
        """Itself: Lightning forwards ``set_epoch`` only to ``batch_sampler.sampler``."""
        return self

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose batches the next ``iter()`` yields."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self._num_batches

    def __iter__(self):
        epoch, skip = self.epoch, 0
        if self._resume is not None:
            resume_epoch, resume_skip = self._resume
            self._resume = None
            skip = resume_skip if resume_epoch == epoch else 0
        self._iteration = (epoch, skip)
        batches = self.rank_batches(epoch)[skip:]
        # Sorting the epoch made temporaries several times the size of ``lengths``; the heap keeps
        # freed memory (keep_freed_host_memory), so hand it back now rather than hold it all epoch
        release_free_memory()
        for batch in batches:
            yield batch.tolist()

    def position(self, handed_out: int) -> tuple[int, int]:
        """(epoch, batches done) once ``handed_out`` batches of the current pass were consumed.

        A finished epoch counts as the start of the next one.
        """
        if handed_out == 0:  # the pass has not handed anything out (it may not have started)
            if self._resume is not None:
                return self._resume
            return self._iteration if self._iteration[0] == self.epoch else (self.epoch, 0)
        epoch, skipped = self._iteration
        done = skipped + handed_out
        return (epoch + 1, 0) if done >= len(self) else (epoch, done)

    def resume(self, epoch: int, batches_done: int) -> None:
        """Make the next pass over ``epoch`` start after its first ``batches_done`` batches."""
        self.set_epoch(epoch)
        self._resume = (int(epoch), int(batches_done))

    def rank_batches(self, epoch: int) -> list[np.ndarray]:
        """This rank's batches (arrays of dataset indices) of ``epoch``, in iteration order.

        They are views of one array of this rank's indices alone, so a rank holds its share of
        the epoch's order, not every rank's.
        """
        mine = self.global_batches(epoch)[self.rank :: self.world_size]
        if self.world_size == 1 or not mine:
            return mine
        ends = np.cumsum([len(batch) for batch in mine])
        return np.split(np.concatenate(mine), ends[:-1])

    def global_batches(self, epoch: int) -> list[np.ndarray]:
        """All ranks' batches of ``epoch``; batch ``i`` goes to rank ``i % world_size``."""
        rng = np.random.default_rng([self.seed, epoch])
        n = len(self.lengths)
        order = rng.permutation(n) if self.shuffle else np.arange(n)
        order = order.astype(np.int32 if n < 2**31 else np.int64)  # the batches are views of it
        if self.bucket_by_length:
            keys = [self.lengths[order]]
            if self.tiebreak_lengths is not None:
                keys.insert(0, self.tiebreak_lengths[order])
            order = order[np.lexsort(keys)]
        batches = self._even_out(self._chunk(order))
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def _chunk(self, order: np.ndarray) -> list[np.ndarray]:
        if self.max_tokens is None:
            size = self.max_sentences
            return [order[i : i + size] for i in range(0, len(order), size)]
        sorted_lengths = self.lengths[order]
        cap = self.max_sentences or len(order)
        batches, start = [], 0
        while start < len(order):
            # sizes are ascending, so "count x last length fits" is monotone in count: bisect it
            low = 1
            high = min(cap, len(order) - start, self.max_tokens // int(sorted_lengths[start]))
            while low < high:
                mid = (low + high + 1) // 2
                if mid * int(sorted_lengths[start + mid - 1]) <= self.max_tokens:
                    low = mid
                else:
                    high = mid - 1
            batches.append(order[start : start + low])
            start += low
        return batches

    def _even_out(self, batches: list[np.ndarray]) -> list[np.ndarray]:
        """Make the number of batches a multiple of ``world_size`` (see the class docstring)."""
        target = math.ceil(len(batches) / self.world_size) * self.world_size
        if target <= len(self.lengths):
            while len(batches) < target:
                largest = max(range(len(batches)), key=lambda i: len(batches[i]))
                batch = batches.pop(largest)
                half = len(batch) // 2
                batches[largest:largest] = [batch[:half], batch[half:]]
            return batches
        if batches:
            log.warning(
                "%d examples cannot fill %d ranks equally; repeating %d batches",
                len(self.lengths),
                self.world_size,
                target - len(batches),
            )
        original = list(batches)
        while len(batches) < target:
            batches.append(original[len(batches) % len(original)])
        return batches


class SharingDataLoader(DataLoader):
    """A ``DataLoader`` whose forked worker processes share the main process's memory.

    A forked worker shares every page of its parent until one side writes to it. Two things
    would write: the workers' garbage collector, which marks every Python object it scans, and
    the parent reusing heap memory it had freed (a corpus read during preparation, say), which
    leaves the old page to the workers. So before workers are started the parent collects its
    garbage, hands free heap pages back to the kernel, and freezes its objects
    (``gc.freeze``), which the workers' collector then never scans.
    """

    def __iter__(self):
        if self.num_workers == 0:
            return super().__iter__()
        gc.collect()
        release_free_memory()
        gc.freeze()
        try:
            return super().__iter__()
        finally:
            gc.unfreeze()  # in this process; the workers keep theirs frozen


class ResumableDataLoader(SharingDataLoader):
    """A ``DataLoader`` over a :class:`TokenBucketBatchSampler` whose position can be saved.

    ``state_dict()`` is ``{"epoch", "batches_done", ...}`` counted in batches handed to the
    caller (not batches prefetched by workers); a finished epoch is saved as the start of the
    next one. ``load_state_dict`` makes the next iteration skip the batches already done, so a
    run resumed from a mid-epoch checkpoint sees exactly the batches it had not seen yet.
    """

    def __iter__(self):
        iterator = super().__iter__()
        self._live_iterator = iterator
        return iterator

    def state_dict(self) -> dict:
        sampler: TokenBucketBatchSampler = self.batch_sampler
        iterator = getattr(self, "_live_iterator", None)
        # torch's iterators count the batches they returned, whatever the workers prefetched
        handed_out = batches_yielded(iterator) if iterator is not None else 0
        epoch, done = sampler.position(handed_out)
        return {
            "epoch": epoch,
            "batches_done": done,
            "num_batches": len(sampler),
            "world_size": sampler.world_size,
            "seed": sampler.seed,
        }

    def load_state_dict(self, state: dict) -> None:
        sampler: TokenBucketBatchSampler = self.batch_sampler
        expected = {
            "num_batches": len(sampler),
            "world_size": sampler.world_size,
            "seed": sampler.seed,
        }
        changed = {k: (state.get(k), v) for k, v in expected.items() if state.get(k) != v}
        if changed:
            log.warning(
                "train data changed since the checkpoint (saved, now: %s); epoch %d restarts "
                "from its first batch",
                changed,
                state["epoch"],
            )
            sampler.resume(state["epoch"], 0)
            return
        sampler.resume(state["epoch"], state["batches_done"])


@dataclass(frozen=True)
class PadCollator:
    """Turn ``(id, source ids, target ids)`` examples, or an :class:`ExampleBatch` of them,
    into a padded batch.

    ``src_ids`` = ids + EOS, ``tgt_in_ids`` = BOS + ids, ``labels`` = ids + EOS, each padded
    with ``pad_id`` to the longest in the batch; ``ids`` are the examples' pair ids. An
    :class:`ExampleBatch` (what the data module's datasets hand a DataLoader) is padded with
    array operations alone, without a Python loop over its examples.
    """

    pad_id: int
    bos_id: int
    eos_id: int

    def __call__(
        self, examples: ExampleBatch | Sequence[tuple[int, np.ndarray, np.ndarray]]
    ) -> dict:
        if isinstance(examples, ExampleBatch):
            return self._pad_flat(examples)
        n = len(examples)
        src_width = max(len(src) for _, src, _ in examples) + 1
        tgt_width = max(len(tgt) for _, _, tgt in examples) + 1
        src_ids = np.full((n, src_width), self.pad_id, dtype=np.int64)
        tgt_in_ids = np.full((n, tgt_width), self.pad_id, dtype=np.int64)
        labels = np.full((n, tgt_width), self.pad_id, dtype=np.int64)
        for row, (_, src, tgt) in enumerate(examples):
            src_ids[row, : len(src)] = src
            src_ids[row, len(src)] = self.eos_id
            tgt_in_ids[row, 0] = self.bos_id
            tgt_in_ids[row, 1 : len(tgt) + 1] = tgt
            labels[row, : len(tgt)] = tgt
            labels[row, len(tgt)] = self.eos_id
        return {
            "src_ids": torch.from_numpy(src_ids),
            "tgt_in_ids": torch.from_numpy(tgt_in_ids),
            "labels": torch.from_numpy(labels),
            "ids": torch.tensor([pair for pair, _, _ in examples], dtype=torch.long),
        }

    def _pad_flat(self, batch: ExampleBatch) -> dict:
        rows = np.arange(len(batch))
        src_ids = self._padded(batch.src_tokens, batch.src_lengths, first=0)
        src_ids[rows, batch.src_lengths] = self.eos_id
        tgt_in_ids = self._padded(batch.tgt_tokens, batch.tgt_lengths, first=1)
        tgt_in_ids[:, 0] = self.bos_id
        labels = self._padded(batch.tgt_tokens, batch.tgt_lengths, first=0)
        labels[rows, batch.tgt_lengths] = self.eos_id
        return {
            "src_ids": torch.from_numpy(src_ids),
            "tgt_in_ids": torch.from_numpy(tgt_in_ids),
            "labels": torch.from_numpy(labels),
            "ids": torch.from_numpy(np.asarray(batch.ids, dtype=np.int64)),
        }

    def _padded(self, tokens: np.ndarray, lengths: np.ndarray, first: int) -> np.ndarray:
        """[B, longest + 1] of ``pad_id`` with row i's ids in columns first … first+len_i-1."""
        width = int(lengths.max()) + 1
        out = np.full((len(lengths), width), self.pad_id, dtype=np.int64)
        inside = np.arange(width - 1) < lengths[:, None]  # row-major order = concatenated order
        out[:, first : first + width - 1][inside] = tokens
        return out


def padding_fraction(
    src_lengths: np.ndarray, tgt_lengths: np.ndarray, batches: Sequence[Sequence[int]]
) -> float:
    """Mean over batches of the share of pad cells in the padded source and target tensors."""
    fractions = []
    for batch in batches:
        src, tgt = src_lengths[batch], tgt_lengths[batch]
        cells = len(batch) * (src.max() + tgt.max())
        fractions.append(1.0 - (src.sum() + tgt.sum()) / cells)
    return float(np.mean(fractions)) if fractions else 0.0
