"""W&B never blocks a run: mode resolution, credentials detection, online -> offline fallback."""

import logging

import pytest

from transformer_nmt.tracking import loggers
from transformer_nmt.tracking.loggers import has_wandb_credentials, wandb_logger, wandb_mode


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    return tmp_path / "netrc"


def test_mode_is_explicit_then_env_then_by_credentials(no_credentials, monkeypatch):
    assert wandb_mode() == "offline"
    no_credentials.write_text("machine api.wandb.ai\n  login user\n  password secret\n")
    assert has_wandb_credentials() and wandb_mode() == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wandb_mode() == "disabled"
    assert wandb_mode("offline") == "offline"


def test_an_api_key_or_another_hosts_netrc_entry(no_credentials, monkeypatch):
    no_credentials.write_text("machine example.org login u password p\n")
    assert not has_wandb_credentials()
    monkeypatch.setenv("WANDB_BASE_URL", "https://example.org")
    assert has_wandb_credentials()
    monkeypatch.delenv("WANDB_BASE_URL")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert has_wandb_credentials()


class _FakeRun:
    def __init__(self, directory):
        self.dir = str(directory / "wandb" / "offline-run-x" / "files")
        self.finished_with = None

    def finish(self, exit_code=0):
        self.finished_with = exit_code


def test_a_failing_online_start_falls_back_to_offline(
    no_credentials, monkeypatch, tmp_path, caplog
):
    import wandb

    modes = []

    def fake_init(**kwargs):
        modes.append(kwargs["mode"])
        if kwargs["mode"] == "online":
            raise wandb.errors.CommError("network is unreachable")
        return _FakeRun(tmp_path)

    monkeypatch.setattr(wandb, "init", fake_init)
    monkeypatch.setattr(wandb, "run", None)
    logger = wandb_logger(project="p", save_dir=str(tmp_path), mode="online", init_timeout=60)
    with caplog.at_level(logging.INFO, logger=loggers.__name__):
        run = logger.experiment
    assert modes == ["online", "offline"] and isinstance(run, _FakeRun)
    assert "could not start an online run" in caplog.text
    expected = (
        f"W&B: offline run in {tmp_path / 'wandb' / 'offline-run-x'}; upload with `wandb sync"
    )
    assert expected in caplog.text
    loggers.finish_loggers([logger], success=False)
    assert run.finished_with == 1


def test_csv_logger_resumed_in_place_keeps_the_rows_before_its_first_step(tmp_path):
    from tests.helpers.tiny_runs import logged_metrics
    from transformer_nmt.tracking.loggers import ResumableCSVLogger

    first = ResumableCSVLogger(tmp_path, name="csv", version="")
    for step in range(10):  # a run killed after step 9, its last checkpoint at step 6
        first.log_metrics({"train/loss": 10.0 - step}, step=step)
    first.save()
    resumed = ResumableCSVLogger(tmp_path, name="csv", version="")
    for step in range(6, 8):  # logs steps 6 and 7 again, and a new column
        resumed.log_metrics({"train/loss": 1.0, "val/loss": 2.0}, step=step)
    resumed.save()
    rows = logged_metrics(tmp_path / "csv" / "metrics.csv")
    assert [int(row["step"]) for row in rows] == list(range(8))
    assert [row["train/loss"] for row in rows[:6]] == [str(10.0 - s) for s in range(6)]
    assert [(row["train/loss"], row["val/loss"]) for row in rows[6:]] == [("1.0", "2.0")] * 2
    assert rows[0]["val/loss"] == ""
