"""Requeueing a job that SLURM is about to stop (its time limit, or pre-emption), via submitit.

``hydra/launcher=slurm`` (and ``local``) run each job under submitit, which submits it with
``--signal=USR2@<signal_delay_s>``: SLURM sends SIGUSR2 that long before the time limit, and
submitit's handler then requeues the job (at most ``max_num_timeout`` times for time limits;
pre-emptions always) and exits at once, wherever training is. Everything since the last
``last.ckpt`` would be lost. :class:`RequeueOnSignal` defers that handler to a batch boundary: the
signal is only noted, training stops at the end of the current batch (``LastCheckpoint`` writes
``last.ckpt`` there, as on any stop), and the job then calls submitit's handler, which requeues
it. The requeued job runs the same overrides in the same directory and resumes from that
``last.ckpt`` (``resume=auto``, the default under the submitit launchers).
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

log = logging.getLogger(__name__)


def submitit_signal() -> signal.Signals:
    """The signal submitit requeues on: SIGUSR2, or ``SUBMITIT_PREEMPT_SIGNAL``."""
    return signal.Signals["SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")]


def submitit_handler() -> Callable[[int, Any], None] | None:
    """submitit's requeueing signal handler, if this process is a submitit job; else None."""
    handler = signal.getsignal(submitit_signal())
    owner = getattr(handler, "__self__", None)
    return handler if type(owner).__module__.startswith("submitit.") else None


class RequeueOnSignal(Callback):
    """Turns submitit's requeue signal into a stop at the end of the current training batch; after
    ``fit`` returns, :meth:`requeue` hands over to submitit (which requeues the job and exits).

    With several ranks, they agree at every batch end (one boolean all-reduce) so that all stop
    at the same step; every rank needs the callback, also those Lightning started itself, which
    are no submitit tasks (``handler`` None: they only take part in the agreement).
    """

    def __init__(self, handler: Callable[[int, Any], None] | None) -> None:
        self.signum = submitit_signal()
        self._submitit_handler = handler
        self._received = False
        self.requested = False  # training stopped for a requeue
        self.stopped_at: int | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # After Lightning saved the handlers it found (submitit's among them): it puts them back
        # when fit ends, so that a signal during the final evaluation requeues at once.
        if self._submitit_handler is not None:
            signal.signal(self.signum, self._note)

    def _note(self, signum: int, frame: Any) -> None:
        self._received = True
        log.warning(
            "received %s: training stops at the end of this batch, writes last.ckpt and the job "
            "is requeued",
            signal.Signals(signum).name,
        )

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        received = self._received
        if trainer.world_size > 1:
            received = trainer.strategy.reduce_boolean_decision(received, all=False)
        if received and not self.requested:
            self.requested = True
            self.stopped_at = trainer.global_step
            trainer.should_stop = True  # LastCheckpoint, a Checkpoint, runs after this and saves

    def requeue(self) -> None:
        """Let submitit requeue the job: it exits this process (its first task; others return)."""
        if self._submitit_handler is not None:
            log.info("requeueing the job after step %s", self.stopped_at)
            self._submitit_handler(self.signum, None)


def under_submitit() -> bool:
    """Whether this is a job of a submitit launcher (``hydra/launcher=slurm|local``)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return False
    return "hydra_submitit_launcher" in str(HydraConfig.get().launcher.get("_target_", ""))
