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
