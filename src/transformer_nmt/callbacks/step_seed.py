"""Dropout masks as a function of the position in training, so a resumed run repeats them."""

from __future__ import annotations

import torch
from lightning.pytorch.callbacks import Callback


class StepSeed(Callback):
    """Reseeds torch before every training batch from (seed, epoch, batch index, rank).

    Dropout masks then depend only on the position in training, so a run resumed from a
    checkpoint draws the same masks as an uninterrupted one and continues its loss curve exactly
    (fairseq reseeds per update the same way). Ranks get different masks.
    """

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        key = (self.seed, trainer.current_epoch, batch_idx, trainer.global_rank)
        value = 0
        for part in key:
            value = (value * 1_000_003 + part) % (2**61 - 1)
        torch.manual_seed(value)
