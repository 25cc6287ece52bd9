"""Token-bucket batching, DDP sharding, epochs and resume, also inside a Lightning Trainer."""

import gc
import subprocess
import sys
from types import SimpleNamespace

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

from tests.helpers.run_if import run_if
from transformer_nmt.data import ResumableDataLoader, TokenBucketBatchSampler, padding_fraction
from transformer_nmt.data.bucketing import SharingDataLoader


@pytest.fixture
def lengths() -> np.ndarray:
    return np.random.default_rng(0).integers(1, 60, size=1001)


def test_no_batch_over_max_tokens_and_all_examples_once(lengths):
    sampler = TokenBucketBatchSampler(lengths, max_tokens=300, seed=3)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert all(len(b) * lengths[b].max() <= 300 for b in batches)
        assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
        assert len(batches) == len(sampler)


def test_max_sentences_caps_token_batches(lengths):
    sampler = TokenBucketBatchSampler(lengths, max_tokens=10_000, max_sentences=16)
    assert max(len(b) for b in sampler) == 16


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("max_tokens", [300, 2000])
def test_ranks_get_disjoint_shards_of_equal_length_covering_each_example_once(
    lengths, world_size, max_tokens
):
    for epoch in range(2):
        shards = []
        for rank in range(world_size):
            sampler = TokenBucketBatchSampler(
                lengths, max_tokens=max_tokens, seed=7, rank=rank, world_size=world_size
            )
            sampler.set_epoch(epoch)
            shards.append(list(sampler))
            assert len(shards[-1]) == len(sampler)
        assert len({len(shard) for shard in shards}) == 1
        seen = [i for shard in shards for batch in shard for i in batch]
        assert sorted(seen) == list(range(len(lengths)))
        assert all(len(b) * lengths[b].max() <= max_tokens for s in shards for b in s)


def test_fewer_examples_than_ranks_still_gives_equal_batch_counts():
    samplers = [
        TokenBucketBatchSampler([3, 4, 5], max_tokens=8, rank=r, world_size=4) for r in range(4)
    ]
    shards = [list(sampler) for sampler in samplers]
    assert [len(s) for s in shards] == [1, 1, 1, 1]


def test_epochs_reshuffle_deterministically_from_the_seed(lengths):
    def batches(seed: int, epoch: int) -> list[list[int]]:
        sampler = TokenBucketBatchSampler(lengths, max_tokens=300, seed=seed)
        sampler.set_epoch(epoch)
        return list(sampler)

    assert batches(0, 1) == batches(0, 1)
    assert batches(0, 1) != batches(0, 2)
    assert batches(0, 1) != batches(1, 1)
    assert len(batches(0, 1)) == len(batches(0, 2))


def test_eval_order_is_fixed_and_sorted_by_length(lengths):
    sampler = TokenBucketBatchSampler(lengths, max_tokens=300, shuffle=False)
    first = list(sampler)
    sampler.set_epoch(5)
    assert list(sampler) == first
    order = [i for b in first for i in b]
    assert list(lengths[order]) == sorted(lengths)


def test_fixed_batch_size_mode(lengths):
    sampler = TokenBucketBatchSampler(lengths, max_sentences=64, bucket_by_length=False)
    batches = list(sampler)
    assert sorted(len(b) for b in batches) == [41] + [64] * 15
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))


def test_bucketing_pads_less_than_fixed_batches(lengths):
    src, tgt = (
        lengths,
        np.maximum(1, lengths + np.random.default_rng(1).integers(-3, 4, len(lengths))),
    )
    bucketed = TokenBucketBatchSampler(np.maximum(src, tgt), max_tokens=1000)
    fixed = TokenBucketBatchSampler(src, max_sentences=32, bucket_by_length=False)
    assert (
        padding_fraction(src, tgt, list(bucketed)) < 0.1 < padding_fraction(src, tgt, list(fixed))
    )


def test_oversized_example_is_rejected():
    with pytest.raises(ValueError, match="exceeds max_tokens"):
        TokenBucketBatchSampler([5, 50], max_tokens=40)


def _loader(lengths, num_workers=0, **kwargs) -> ResumableDataLoader:
    sampler = TokenBucketBatchSampler(lengths, max_tokens=300, seed=1, **kwargs)
    return ResumableDataLoader(
        range(len(lengths)), batch_sampler=sampler, collate_fn=list, num_workers=num_workers
    )


@pytest.mark.parametrize("num_workers", [0, 1])
def test_resume_mid_epoch_yields_exactly_the_unseen_batches(lengths, num_workers):
    loader = _loader(lengths)
    loader.batch_sampler.set_epoch(2)
    full_epoch = list(loader)
    iterator = iter(loader)
    seen = [next(iterator) for _ in range(5)]
    state = loader.state_dict()
    assert (state["epoch"], state["batches_done"]) == (2, 5)

    resumed = _loader(lengths, num_workers=num_workers)
    resumed.load_state_dict(state)
    iterator = iter(resumed)  # with workers, this already draws batches from the sampler
    assert resumed.state_dict()["batches_done"] == 5
    rest = list(iterator)
    assert seen + rest == full_epoch
    assert resumed.state_dict()["epoch"] == 3 and resumed.state_dict()["batches_done"] == 0
    resumed.batch_sampler.set_epoch(3)
    assert len(list(resumed)) == len(full_epoch)  # the next epoch is whole again


def test_resume_ignores_state_of_a_different_setup(lengths):
    state = _loader(lengths, world_size=2).state_dict() | {"batches_done": 3}
    loader = _loader(lengths)
    loader.load_state_dict(state)
    assert len(list(loader)) == len(loader)


def test_datamodule_shards_across_two_simulated_ranks(make_dm):
    ids, counts = [], []
    for rank in range(2):
        dm = make_dm(max_tokens=128)
        dm.trainer = SimpleNamespace(global_rank=rank, world_size=2)
        batches = list(dm.train_dataloader())
        counts.append(len(batches))
        ids += [i for b in batches for i in b["ids"].tolist()]
        for b in batches:
            assert b["src_ids"].numel() <= 128 and b["labels"].numel() <= 128
    assert counts[0] == counts[1]
    assert sorted(ids) == list(dm.datasets["train"].example_ids)


class _IdRecorder(pl.LightningModule):
    """A minimal module that records the example ids of every training batch per epoch."""

    def __init__(self, vocab_size: int, max_len: int = 999) -> None:
        super().__init__()
        self.save_hyperparameters()  # keys shared with the datamodule's, other values
        self.embedding = torch.nn.Embedding(vocab_size, 2)
        self.seen: dict[int, list[list[int]]] = {}

    def training_step(self, batch, batch_idx):
        self.seen.setdefault(self.current_epoch, []).append(batch["ids"].tolist())
        return self.embedding(batch["src_ids"]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _trainer(tmp_path, **kwargs) -> pl.Trainer:
    options = {
        "accelerator": "cpu",
        "use_distributed_sampler": False,
        "logger": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
        "limit_val_batches": 0,
        "default_root_dir": tmp_path,
    }
    return pl.Trainer(**options | kwargs)


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
def test_lightning_sets_the_epoch_and_resumes_mid_epoch(make_dm, tmp_path):
    dm = make_dm(max_tokens=128)
    model = _IdRecorder(dm.vocab_size)
    _trainer(tmp_path, max_epochs=2, enable_checkpointing=False).fit(model, datamodule=dm)
    sampler = dm.train_dataloader().batch_sampler
    example_ids = dm.datasets["train"].example_ids
    expected = {e: [example_ids[b].tolist() for b in sampler.rank_batches(e)] for e in (0, 1)}
    assert model.seen == expected and expected[0] != expected[1]

    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=3, save_top_k=-1)
    stopped = _IdRecorder(dm.vocab_size)
    _trainer(tmp_path, max_steps=3, callbacks=[checkpoint]).fit(
        stopped, datamodule=make_dm(max_tokens=128)
    )
    resumed = _IdRecorder(dm.vocab_size)
    path = next((tmp_path / "ckpt").glob("*step=3.ckpt"))
    _trainer(tmp_path, max_epochs=1, enable_checkpointing=False).fit(
        resumed, datamodule=make_dm(max_tokens=128), ckpt_path=path
    )
    assert stopped.seen[0] + resumed.seen[0] == expected[0]


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
def test_datamodule_hparams_do_not_clash_with_model_hparams_in_loggers(make_dm, tmp_path):
    dm = make_dm()
    model = _IdRecorder(vocab_size=dm.vocab_size + 1, max_len=dm.max_len + 1)
    trainer = _trainer(
        tmp_path, max_steps=1, logger=CSVLogger(tmp_path), enable_checkpointing=False
    )
    trainer.fit(model, datamodule=dm)
    assert trainer.global_step == 1
    assert dm.hparams["max_len"] == 32


def test_fixed_batch_size_mode_in_the_datamodule(make_dm):
    dm = make_dm(max_tokens=None, batch_size=16)
    sizes = sorted(len(b["ids"]) for b in dm.train_dataloader())
    assert sizes == [14] + [16] * 14  # 238 training examples: no empty or over-long pair
    val_ids = [i for b in dm.val_dataloader() for i in b["ids"].tolist()]
    assert val_ids == list(range(30))


def _freeze_count_in_worker(examples):
    return gc.get_freeze_count()


@pytest.mark.slow
def test_forked_workers_keep_the_parents_objects_frozen_and_yield_the_same_batches():
    lengths = np.random.default_rng(0).integers(1, 30, 400)
    sampler = TokenBucketBatchSampler(lengths, max_tokens=300, seed=1)
    dataset = list(range(400))
    with_workers = SharingDataLoader(
        dataset, batch_sampler=sampler, num_workers=2, collate_fn=_freeze_count_in_worker
    )
    assert all(count > 0 for count in with_workers)  # the workers' collector skips them
    assert gc.get_freeze_count() == 0  # this process collects its objects again
    plain = SharingDataLoader(dataset, batch_sampler=sampler, num_workers=2, collate_fn=list)
    assert [list(b) for b in plain] == [list(b) for b in sampler]


# Anonymous resident memory (MiB) a sampler over 3M examples holds once its first epoch started,
# in a process whose heap keeps freed memory (train.py's keep_freed_host_memory).
EPOCH_MEMORY_PROBE = """
import sys
import numpy as np
from transformer_nmt.data import TokenBucketBatchSampler
from transformer_nmt.host_memory import keep_freed_memory, release_free_memory

def anonymous_mib():
    with open("/proc/self/smaps_rollup") as rollup:
        return next(int(l.split()[1]) for l in rollup if l.startswith("Pss_Anon")) / 1024

assert keep_freed_memory()
lengths = np.random.default_rng(0).integers(1, 100, 3_000_000).astype(np.int32)
release_free_memory()
before = anonymous_mib()
sampler = TokenBucketBatchSampler(lengths, tiebreak_lengths=lengths, max_tokens=4096, seed=1)
first = next(iter(sampler))
print(lengths.nbytes / 2**20, anonymous_mib() - before)
"""


@pytest.mark.slow  # starts a Python process
@run_if(linux=True)
def test_an_epoch_keeps_its_batches_not_the_temporaries_of_sorting_them():
    out = subprocess.run(
        [sys.executable, "-c", EPOCH_MEMORY_PROBE], capture_output=True, text=True, check=True
    ).stdout.split()
    lengths_mib, held_mib = float(out[0]), float(out[1])
    # the epoch's order (the size of the lengths) and the batch list; sorting made temporaries
    # several times that size, which the heap would keep unless given back
    assert held_mib < 3 * lengths_mib, (
        f"{held_mib:.0f} MiB held for {lengths_mib:.0f} MiB of lengths"
    )
