"""Kill a run with SIGKILL mid-epoch, resume from last.ckpt, and continue the same loss curve.

Design: the killed run has a huge ``max_steps`` and writes last.ckpt every 5 steps; the test
SIGKILLs it as soon as a checkpoint exists, reads the step k it holds (mid-epoch: the tiny
corpus has ~40 batches per epoch), then trains an uninterrupted reference run to k + 6 steps
and resumes the killed run to k + 6 steps. Data order (the data module's resumable loader),
optimizer and scheduler state, and dropout (StepSeed) are restored, so the resumed losses and
learning rates equal the reference's at the same steps, and so do the final weights.
"""

import signal

import pytest
import torch

from tests.helpers.commands import run_train, start_train_until
from tests.helpers.tiny_runs import logged_metrics


def train_losses(run_dir) -> dict[int, tuple[float, float]]:
    rows = logged_metrics(run_dir / "csv" / "metrics.csv")
    return {int(r["step"]): (float(r["train/loss"]), float(r["lr"])) for r in rows if r["lr"]}


@pytest.mark.slow  # three runs of train.py
def test_sigkill_mid_epoch_then_resume_continues_the_loss_curve(tiny_overrides, tmp_path):
    base = [*tiny_overrides, "callbacks.sample_translations=null", "trainer.val_check_interval=7"]
    killed = tmp_path / "killed"
    last = killed / "checkpoints" / "last.ckpt"
    args = [
        *base, "trainer.max_steps=100000", "callbacks.last_checkpoint.every_n_train_steps=5",
        f"hydra.run.dir={killed}",
    ]  # fmt: skip
    process = start_train_until(args, tmp_path, last)
    try:
        assert last.exists(), "the run wrote no checkpoint"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert process.returncode == -signal.SIGKILL

    checkpoint = torch.load(last, weights_only=False)
    k = checkpoint["global_step"]
    loader = checkpoint["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
    assert k % 5 == 0 and 0 < loader["batches_done"] < loader["num_batches"]  # mid-epoch

    target = [f"trainer.max_steps={k + 6}"]
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    run_train([*base, *target, f"hydra.run.dir={reference}"], cwd=tmp_path)
    run_train([*base, *target, f"hydra.run.dir={resumed}", f"ckpt_path={last}"], cwd=tmp_path)

    expected, got = train_losses(reference), train_losses(resumed)
    assert sorted(got) == list(range(k, k + 6))  # the step count continues from the checkpoint
    for step in got:
        assert got[step] == pytest.approx(expected[step], rel=1e-5, abs=1e-6), step
    final_ref = torch.load(reference / "checkpoints" / "last.ckpt", weights_only=False)
    final_res = torch.load(resumed / "checkpoints" / "last.ckpt", weights_only=False)
    assert final_res["global_step"] == final_ref["global_step"] == k + 6
    for key, value in final_ref["state_dict"].items():
        torch.testing.assert_close(final_res["state_dict"][key], value, rtol=1e-5, atol=1e-6)


def test_resume_auto_is_the_default_of_submitit_jobs_and_ckpt_path_wins(tmp_path, workspace):
    import shutil

    from omegaconf import OmegaConf

    from transformer_nmt.callbacks import LastCheckpoint
    from transformer_nmt.cli.errors import UsageError
    from transformer_nmt.cli.train_config import plan_resume, resume_mode

    assert resume_mode(None) == "never"  # outside a job of hydra/launcher=slurm|local
    assert (resume_mode(True), resume_mode(False), resume_mode("auto")) == ("auto", "never", "auto")
    with pytest.raises(UsageError, match="resume=sometimes is not an option"):
        resume_mode("sometimes")
    callbacks = [LastCheckpoint(str(tmp_path / "checkpoints"), every_n_train_steps=10)]
    model = workspace.model.config.to_dict()

    def start(**options):
        cfg = OmegaConf.create({"ckpt_path": None, "resume": None, "output_dir": str(tmp_path)})
        cfg = OmegaConf.merge(cfg, {"data": {"src_lang": "en", "tgt_lang": "de"}}, options)
        return plan_resume(cfg, model, callbacks).ckpt_path

    assert start(resume="auto") is None  # nothing to resume yet
    (tmp_path / "checkpoints").mkdir()
    shutil.copy(workspace.ckpt_path, tmp_path / "checkpoints" / "last.ckpt")
    assert start(resume="auto") == str(tmp_path / "checkpoints" / "last.ckpt")
    assert start(resume="never") is None and start() is None
    other = shutil.copy(workspace.ckpt_path, tmp_path / "other.ckpt")
    assert start(resume="auto", ckpt_path=str(other)) == str(other)
    assert start(resume="auto", ckpt_path="last") == "last"  # Lightning's name: it resolves it


@pytest.mark.slow  # two runs of train.py
def test_resume_auto_in_place_continues_and_keeps_the_earlier_metrics(tiny_overrides, tmp_path):
    run_dir = tmp_path / "run"
    base = [*tiny_overrides, "trainer.val_check_interval=4", f"hydra.run.dir={run_dir}"]
    run_train([*base, "trainer.max_steps=8"], cwd=tmp_path)
    before = logged_metrics(run_dir / "csv" / "metrics.csv")
    result = run_train([*base, "trainer.max_steps=12", "resume=auto"], cwd=tmp_path)
    assert f"resuming from {run_dir / 'checkpoints' / 'last.ckpt'} (resume=auto)" in result.stdout
    after = logged_metrics(run_dir / "csv" / "metrics.csv")
    assert [int(r["step"]) for r in after if r["train/loss"]] == list(range(12))
    losses = [r["train/loss"] for r in after if r["train/loss"] and int(r["step"]) < 8]
    assert losses == [r["train/loss"] for r in before if r["train/loss"]]  # kept as they were
    assert len([r for r in after if r["val/loss"]]) == 3  # steps 4 and 8, then 12
