"""Stopping a run cleanly on a signal, and requeueing a job that SLURM is about to stop.

Kubernetes, SLURM (at a time limit, on pre-emption, on ``scancel``), ``docker stop`` and systemd
send SIGTERM before they kill; a terminal sends SIGINT. :class:`StopOnSignal` makes every one of
them, at any moment of ``train.py``, end the same way. The contract:

* The signals: SIGTERM and SIGINT always; SIGUSR1 and SIGUSR2 in a SLURM job (``sbatch
  --signal=<sig>@<seconds>`` sends one of them ahead of the time limit) and the requeue signal of
  a submitit job (``hydra/launcher=slurm|local``: SIGUSR2, or ``SUBMITIT_PREEMPT_SIGNAL``).
  Elsewhere SIGUSR1/2 keep their default action.
* During training the signal is only noted. Training stops at the end of the current optimizer
  step (with gradient accumulation: after the step's last batch); with several ranks, at the
  next logging step (``trainer.log_every_n_steps``), where the ranks agree (one all-reduce) and
  all stop at the same step. ``LastCheckpoint`` writes
  ``last.ckpt`` there, atomically. A validation under way runs to its end first, and Lightning
  validates once more at the stop step (as at any early stop), after ``last.ckpt`` is written.
* Before training (reading data, training the BPE) or after it (the final evaluation) nothing is
  left to save: the job stops at once.
* Then, however it stopped, the job skips the final evaluation, closes its loggers, writes
  ``summary.json`` with ``status: interrupted``, the step and the signal, and exits with status
  128 + the signal's number (143 for SIGTERM, 130 for SIGINT) on global rank 0 (the other ranks
  exit 0: rank 0 reports the stop). A submitit job signalled with its requeue signal instead
  says ``requeued`` and hands over to submitit's handler, which requeues it and exits.
* Further signals while stopping, and any signal once the job closes its loggers and writes
  ``summary.json``, are logged and otherwise ignored: they cannot break those writes.
* ``resume=auto`` (the default of submitit jobs) then continues from that ``last.ckpt`` exactly
  as if the run had never stopped. In a plain ``sbatch`` script, requeue on the exit status
  (``scontrol requeue $SLURM_JOB_ID`` after 128 + the ``--signal`` number) and run the same
  command with ``resume=auto hydra.run.dir=<run dir>``.

Under submitit, its requeue handler alone would requeue and exit at once, wherever training is,
losing every step since the last ``last.ckpt``; here it runs after the stop, and a requeue signal
outside training goes to it directly.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Callable, Iterator
from typing import Any

import lightning.pytorch as pl
import torch
import torch.distributed
from lightning.pytorch.callbacks import Callback

log = logging.getLogger(__name__)


class SignalReceived(BaseException):
    """A stop signal arrived outside training: the job stops at once (not an ``Exception``, so
    that no ``except Exception`` on the way swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"received {signal.Signals(signum).name}")
        self.signum = signum


def submitit_signal() -> signal.Signals:
    """The signal submitit requeues on: SIGUSR2, or ``SUBMITIT_PREEMPT_SIGNAL``."""
    return signal.Signals["SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")]


def submitit_handler() -> Callable[[int, Any], None] | None:
    """submitit's requeueing signal handler, if this process is a submitit job; else None."""
    handler = signal.getsignal(submitit_signal())
    owner = getattr(handler, "__self__", None)
    return handler if type(owner).__module__.startswith("submitit.") else None


def stop_signals(requeue_signal: signal.Signals | None = None) -> tuple[signal.Signals, ...]:
    """The signals that stop a run here: SIGTERM, SIGINT, SIGUSR1/2 in a SLURM job, and
    ``requeue_signal``."""
    signals = [signal.SIGTERM, signal.SIGINT]
    if "SLURM_JOB_ID" in os.environ:
        signals += [signal.SIGUSR1, signal.SIGUSR2]
    if requeue_signal is not None and requeue_signal not in signals:
        signals.append(requeue_signal)
    return tuple(signals)


class StopOnSignal(Callback):
    """Turns a stop signal into a stop at the end of the current optimizer step (the module's
    docstring holds the whole contract).

    ``requeue_signal`` is submitit's (None outside submitit jobs); ``requeue_handler`` its handler,
    None in the ranks Lightning starts itself, which are no submitit tasks: they only take part
    in the agreement. Every rank needs the callback.
    """

    def __init__(
        self,
        requeue_signal: signal.Signals | None = None,
        requeue_handler: Callable[[int, Any], None] | None = None,
    ) -> None:
        self.signals = stop_signals(requeue_signal)
        self.requeue_signal = requeue_signal
        self._requeue_handler = requeue_handler
        self.signum: int | None = None  # the (agreed) signal that stops the run
        self.requeue_asked = False  # the requeue signal arrived (here, or on another rank)
        self.stopped_at: int | None = None  # the step training stopped at
        self._training = False  # note signals (True) or stop at once (False)
        self._closing = False  # the job is ending anyway: log signals, nothing more
        self._seen_step: int | None = None
        self._saved_handlers: dict[signal.Signals, Any] = {}

    @property
    def requeues(self) -> bool:
        """Whether the job is to be requeued by submitit rather than exit."""
        return self.requeue_asked and self.requeue_signal is not None

    @contextlib.contextmanager
    def handling_signals(self) -> Iterator[StopOnSignal]:
        """Handle the stop signals for the block (the whole job), then restore the handlers."""
        self._saved_handlers = {signum: signal.getsignal(signum) for signum in self.signals}
        for signum in self.signals:
            signal.signal(signum, self._handle)
        try:
            yield self
        finally:
            for signum, handler in self._saved_handlers.items():
                signal.signal(signum, handler)

    def _handle(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self._closing:
            log.warning("received %s while the job closes its loggers: it ends anyway", name)
            return
        if self.signum is not None:
            if signum == self.requeue_signal:
                self.requeue_asked = True
            log.warning("received %s while stopping for %s: ignored", name, self._name())
            return
        self.signum = signum
        self.requeue_asked = signum == self.requeue_signal
        if self._training:
            then = "the job is requeued" if self.requeues else "the run exits"
            log.warning(
                "received %s: training stops at the end of this optimizer step, writes "
                "last.ckpt and %s",
                name,
                then,
            )
            return
        if self.requeue_asked and self._requeue_handler is not None:
            log.warning("received %s outside training: submitit requeues the job now", name)
            self._requeue_handler(signum, frame)
            return
        log.warning("received %s outside training: the run stops now", name)
        raise SignalReceived(signum)

    def closing(self) -> None:
        """The job is closing its loggers and writing summary.json: a signal now changes nothing
        (the run has stopped, however it ended) and must not cut those writes short."""
        self._closing = True

    def _name(self) -> str:
        return signal.Signals(self.signum).name

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Lightning put its own SIGTERM handler in place when fit began (and puts ours back when
        # fit ends): training is ours.
        for signum in self.signals:
            signal.signal(signum, self._handle)
        self._training = True
        self._seen_step = trainer.global_step

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._training = False  # after on_train_end: LastCheckpoint's last save is done

    def on_exception(self, trainer: pl.Trainer, pl_module, exception: BaseException) -> None:
        self._training = False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        stepped, self._seen_step = step != self._seen_step, step
        if not stepped or self.stopped_at is not None:
            return
        signum = self.signum
        if trainer.world_size > 1:
            # The ranks agree on logging steps, where the host reads the step's numbers anyway:
            # an all-reduce read on the host every step would make each step wait for the device.
            if step % max(trainer.log_every_n_steps, 1):
                return
            signum = self._agree(trainer)
        if signum is not None:
            self.stopped_at = step
            trainer.should_stop = True  # LastCheckpoint, a Checkpoint, runs after this and saves

    def _agree(self, trainer: pl.Trainer) -> int | None:
        """The signal all ranks act on: whether any rank received one (the largest number
        wins), and whether one of them was the requeue signal. A signal arriving after the
        all-reduce waits for the next agreement, so every rank decides alike."""
        mine = [self.signum or 0, int(self.requeue_asked)]
        agreed = torch.tensor(mine, dtype=torch.int64, device=trainer.strategy.root_device)
        torch.distributed.all_reduce(agreed, op=torch.distributed.ReduceOp.MAX)
        signum, requeue = (int(value) for value in agreed.tolist())
        if signum and self.signum is None:
            self.signum = signum
        self.requeue_asked = self.requeue_asked or bool(requeue)
        return signum or None

    def exit_status(self) -> int:
        """128 + the signal's number: what a shell reports for a process the signal killed."""
        return 128 + int(self.signum)

    def requeue(self) -> None:
        """Let submitit requeue the job: it exits this process (its first task; others return)."""
        if self._requeue_handler is not None:
            log.info("requeueing the job after step %s", self.stopped_at)
            self._requeue_handler(self.requeue_signal, None)


def under_submitit() -> bool:
    """Whether this is a job of a submitit launcher (``hydra/launcher=slurm|local``)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return False
    return "hydra_submitit_launcher" in str(HydraConfig.get().launcher.get("_target_", ""))
