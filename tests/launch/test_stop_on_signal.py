"""A stop signal (SIGTERM, SIGINT, ...) ends a run cleanly: last.ckpt at the end of the current
optimizer step, summary.json ``interrupted``, exit status 128 + the signal, and ``resume=auto``
continues exactly as if the run had never stopped."""

import json
import os
import signal
import time

import pytest
import torch

from tests.helpers.commands import run_train, start_train_until
from transformer_nmt.launch.requeue import SignalReceived, StopOnSignal, stop_signals


def test_signals_are_handled_for_the_block_and_restored_after():
    before = signal.getsignal(signal.SIGTERM)
    stop = StopOnSignal()
    with stop.handling_signals():
        assert signal.getsignal(signal.SIGTERM) == stop._handle
        assert signal.getsignal(signal.SIGINT) == stop._handle
    assert signal.getsignal(signal.SIGTERM) == before


def test_outside_training_a_signal_stops_at_once_and_a_second_one_is_ignored(caplog):
    stop = StopOnSignal()
    with stop.handling_signals():
        with pytest.raises(SignalReceived, match="received SIGTERM"):
            os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)  # while stopping: noted, no exception
    assert stop.signum == signal.SIGTERM and stop.exit_status() == 143
    assert "received SIGINT while stopping for SIGTERM: ignored" in caplog.text
    assert not stop.requeues


def test_during_training_a_signal_is_only_noted(caplog):
    stop = StopOnSignal()
    with stop.handling_signals():
        stop._training = True  # what on_train_start sets
        os.kill(os.getpid(), signal.SIGINT)
    assert stop.signum == signal.SIGINT and stop.exit_status() == 130
    assert "training stops at the end of this optimizer step" in caplog.text


def test_a_requeue_signal_outside_training_goes_to_submitit_at_once():
    calls = []
    stop = StopOnSignal(signal.SIGUSR2, lambda signum, frame: calls.append(signum))
    with stop.handling_signals():
        os.kill(os.getpid(), signal.SIGUSR2)
    assert calls == [signal.SIGUSR2] and stop.requeues


def test_a_requeue_signal_after_sigterm_still_requeues():
    stop = StopOnSignal(signal.SIGUSR2, lambda signum, frame: None)
    with stop.handling_signals():
        stop._training = True
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGUSR2)
    assert stop.signum == signal.SIGTERM and stop.requeues


def test_sigusr1_and_sigusr2_stop_a_run_only_in_a_slurm_job(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert stop_signals() == (signal.SIGTERM, signal.SIGINT)
    assert stop_signals(signal.SIGUSR2) == (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2)
    monkeypatch.setenv("SLURM_JOB_ID", "17")
    assert set(stop_signals()) == {signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2}


def log_text(run_dir) -> str:
    path = run_dir / "train.log"
    return path.read_text() if path.exists() else ""


@pytest.mark.slow  # three runs of train.py
def test_sigterm_saves_the_step_exits_143_and_resume_auto_continues_bit_identically(
    tiny_overrides, tmp_path
):
    base = [
        *tiny_overrides, "callbacks.sample_translations=null", "trainer.val_check_interval=1000",
        "trainer.accumulate_grad_batches=2",  # the stop waits for the step's second batch
    ]  # fmt: skip
    stopped = tmp_path / "stopped"
    last = stopped / "checkpoints" / "last.ckpt"
    args = [
        *base, "trainer.max_steps=100000", "callbacks.last_checkpoint.every_n_train_steps=4",
        f"hydra.run.dir={stopped}",
    ]  # fmt: skip
    process = start_train_until(args, tmp_path, last)
    try:
        assert last.exists(), "the run wrote no checkpoint"
        process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 60
        while "received SIGTERM" not in log_text(stopped) and time.monotonic() < deadline:
            time.sleep(0.02)
        process.send_signal(signal.SIGINT)  # a second signal while it stops
        process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + signal.SIGTERM

    summary = json.loads((stopped / "summary.json").read_text())
    k = summary["steps"]
    assert (summary["status"], summary["signal"]) == ("interrupted", "SIGTERM")
    assert torch.load(last, weights_only=False)["global_step"] == k >= 4
    log = (stopped / "train.log").read_text()
    assert "received SIGTERM: training stops at the end of this optimizer step" in log
    assert "received SIGINT while stopping for SIGTERM: ignored" in log
    assert "final evaluation" not in log

    target = [f"trainer.max_steps={k + 3}"]
    reference = tmp_path / "reference"
    run_train([*base, *target, f"hydra.run.dir={reference}"], cwd=tmp_path)
    result = run_train([*base, *target, f"hydra.run.dir={stopped}", "resume=auto"], cwd=tmp_path)
    assert f"resuming from {last} (resume=auto)" in result.stdout
    final_ref = torch.load(reference / "checkpoints" / "last.ckpt", weights_only=False)
    final_res = torch.load(last, weights_only=False)
    assert final_res["global_step"] == final_ref["global_step"] == k + 3
    for key, value in final_ref["state_dict"].items():
        assert torch.equal(final_res["state_dict"][key], value), key
    assert json.loads((stopped / "summary.json").read_text())["status"] == "finished"


def test_a_signal_while_the_job_closes_changes_nothing(caplog):
    stop = StopOnSignal()
    with stop.handling_signals():
        stop.closing()
        os.kill(os.getpid(), signal.SIGTERM)  # no exception: summary.json gets written
    assert stop.signum is None
    assert "received SIGTERM while the job closes its loggers: it ends anyway" in caplog.text
