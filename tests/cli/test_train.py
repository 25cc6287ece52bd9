"""`python train.py` end to end: all three loggers, W&B offline fallback, checkpoint contract."""

import json
import math
import os
import re
from pathlib import Path

import pytest
import torch

from tests.helpers.commands import run_train
from tests.helpers.slow import slow_fixture
from tests.helpers.tiny_checkpoint import CONTRACT_KEYS
from tests.helpers.tiny_runs import logged_metrics, without
from tests.helpers.wandb_records import wandb_run
from transformer_nmt.data import load_tokenizer, tokenizer_files, tokenizer_identity
from transformer_nmt.model import Transformer, TransformerConfig
from transformer_nmt.training.schedules import noam

pytestmark = pytest.mark.slow  # every test reads the run of train.py below


@slow_fixture(scope="module")
def many_loggers_run(tiny_overrides, tmp_path_factory):
    """Eight steps with W&B (no credentials, no WANDB_MODE), CSV and TensorBoard, the progress bar
    and the model summary: (run dir, stdout + stderr, stderr)."""
    root = tmp_path_factory.mktemp("cli")
    env = {"WANDB_MODE": "", "WANDB_API_KEY": "", "NETRC": str(root / "no-netrc")}
    env["WANDB_CONFIG_DIR"] = str(root / "wandb-config")
    args = [*without(tiny_overrides, "trainer.enable_"), "logger=many", "trainer.max_steps=8"]
    args += ["trainer.val_check_interval=4", f"hydra.run.dir={root / 'run'}"]
    result = run_train(args, cwd=root, env=env)
    return root / "run", result.stdout + result.stderr, result.stderr


def test_wandb_without_credentials_logs_offline_and_says_how_to_sync(many_loggers_run):
    run_dir, output, _ = many_loggers_run
    match = re.search(r"W&B: offline run in (\S+); upload with `wandb sync (\S+)`", output)
    assert match and match.group(1) == match.group(2)
    offline_dir = Path(match.group(1))
    assert offline_dir.parent == run_dir / "wandb" and offline_dir.name.startswith("offline-run-")
    assert list(offline_dir.glob("run-*.wandb"))


def test_csv_metrics_hold_losses_perplexity_lr_and_throughput(many_loggers_run):
    run_dir, _, _ = many_loggers_run
    rows = logged_metrics(run_dir / "csv" / "metrics.csv")
    train_rows = [r for r in rows if r["train/loss"]]
    assert [int(r["step"]) for r in train_rows] == list(range(8))
    for row in train_rows:  # the lr logged at step s is the one optimizer step s + 1 used
        assert float(row["lr"]) == pytest.approx(noam(int(row["step"]) + 1, 32, 20))
        assert float(row["train/tokens_per_sec"]) > 0
    val_rows = [r for r in rows if r["val/loss"]]
    assert len(val_rows) == 2
    for row in val_rows:
        assert float(row["val/ppl"]) == pytest.approx(math.exp(float(row["val/nll"])), rel=1e-4)
    hparams = (run_dir / "csv" / "hparams.yaml").read_text()
    assert "label_smoothing: 0.1" in hparams and "d_model: 32" in hparams  # composed config


def test_tensorboard_and_sample_translations_are_written(many_loggers_run):
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    run_dir, output, _ = many_loggers_run
    (event_file,) = (run_dir / "tensorboard").glob("events.out.tfevents.*")  # one per run
    events = [e for e in EventFileLoader(str(event_file)).Load() if e.HasField("summary")]
    tags = {value.tag for event in events for value in event.summary.value}
    assert {"train/loss", "val/loss", "test/loss", "val/samples/text_summary"} <= tags
    steps = [event.step for event in events]  # scalars, texts and the HParams summary
    assert steps == sorted(steps) and steps[-1] == 8
    log = (run_dir / "train.log").read_text()
    assert re.search(r"sample 0 @ step 4\n  src: .+\n  ref: .+\n  hyp: ", log)


def test_train_log_reads_without_a_progress_bar(many_loggers_run):
    """A line every log_every_n_steps (1 here) optimizer steps and one per validation."""
    run_dir, _, _ = many_loggers_run
    text = (run_dir / "train.log").read_text()
    line = (
        r"step (\d+)/8 \(\d+\.\d%\) \| epoch 0 \| loss (\d+\.\d{3}) \| lr (\S+) \| [\d,]+ tok/s "
        r"\| elapsed \d+:\d\d:\d\d \| ETA \d+:\d\d:\d\d\n"
    )
    steps = [(int(step), float(loss), float(lr)) for step, loss, lr in re.findall(line, text)]
    assert [step for step, _, _ in steps] == list(range(1, 9))
    rows = logged_metrics(run_dir / "csv" / "metrics.csv")
    losses = [float(r["train/loss"]) for r in rows if r["train/loss"]]  # the logged values
    assert [loss for _, loss, _ in steps] == pytest.approx(losses, abs=1e-3)
    assert [lr for _, _, lr in steps] == pytest.approx(
        [noam(s, 32, 20) for s in range(1, 9)], rel=1e-2
    )
    validation = r"validation @ step (\d) \| loss \d+\.\d{3} \| ppl \d+\.\d\d\n"
    assert re.findall(validation, text) == ["4", "8"]


def test_checkpoints_follow_the_contract_for_plain_torch_load(many_loggers_run):
    run_dir, _, _ = many_loggers_run
    assert (run_dir / "checkpoints" / "best.ckpt").is_file()
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    hparams = checkpoint["hyper_parameters"]
    assert set(hparams) >= CONTRACT_KEYS and checkpoint["global_step"] == 8
    config = TransformerConfig(**hparams["model_config"])
    assert set(hparams["model_config"]) == set(TransformerConfig.__dataclass_fields__)
    state = checkpoint["state_dict"]
    assert all(key.startswith("model.") for key in state)
    model = Transformer(config)
    model.load_state_dict({key.removeprefix("model."): value for key, value in state.items()})
    tokenizer = load_tokenizer(hparams["tokenizer_dir"])
    assert len(tokenizer) == config.src_vocab_size
    assert hparams["tokenizer_identity"] == tokenizer_identity(tokenizer)
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id) == (
        hparams["pad_id"],
        hparams["eos_id"],
    )
    assert not [p for p in os.listdir(run_dir / "checkpoints") if p.endswith(".tmp")]
    # The tokenizer travels inside the checkpoint, byte for byte.
    embedded = checkpoint["tokenizer_files"]
    assert embedded == tokenizer_files(hparams["tokenizer_dir"]) and "tokenizer.json" in embedded


def test_summary_json_feeds_the_sweep_report(many_loggers_run):
    run_dir, _, _ = many_loggers_run
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 8
    assert summary["model"]["d_model"] == 32 and summary["warmup"] == 20
    assert summary["metrics"]["val/ppl"] == pytest.approx(math.exp(summary["metrics"]["val/nll"]))
    assert summary["best"]["checkpoint"].endswith("best.ckpt")


def test_every_summary_value_is_the_last_one_logged_and_names_its_step(many_loggers_run):
    run_dir, _, _ = many_loggers_run
    summary = json.loads((run_dir / "summary.json").read_text())
    metrics, steps = summary["metrics"], summary["metric_steps"]
    assert set(steps) == set(metrics) >= {"train/loss", "lr", "val/loss", "test/loss"}
    rows = logged_metrics(run_dir / "csv" / "metrics.csv")
    for key, value in metrics.items():  # the last point every logger got, at the same step
        last = [row for row in rows if row[key]][-1]
        assert (int(last["step"]), float(last[key])) == (steps[key], pytest.approx(value)), key
    assert steps["test/loss"] == 8 and steps["val/loss"] in (7, 8)  # Lightning logs a validation
    # during fit at the index of the batch it follows (7: the 8th), the final test at the step


def test_the_parameter_count_is_in_the_logged_config(many_loggers_run):
    run_dir, _, _ = many_loggers_run
    params = json.loads((run_dir / "summary.json").read_text())["params"]
    assert f"params: {params}" in (run_dir / "csv" / "hparams.yaml").read_text()
    assert wandb_run(run_dir)[2]["params"] == params


def test_tensorboard_hparams_tab_holds_the_config_and_the_final_metrics(many_loggers_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    run_dir, _, _ = many_loggers_run
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    content = events.PluginTagToContent("hparams")
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"])
    metrics = {info.name.tag for info in experiment.experiment.metric_infos}
    assert metrics >= {"val/loss", "val/ppl", "test/loss", "test/ppl"}
    session = plugin_data_pb2.HParamsPluginData.FromString(
        content["_hparams_/session_start_info"]
    ).session_start_info
    assert session.hparams["model/d_model"].number_value == 32
    assert session.hparams["scheduler/name"].string_value == "noam"
    assert session.hparams["params"].number_value > 0
    summary = json.loads((run_dir / "summary.json").read_text())
    last = events.Scalars("val/loss")[-1]  # the value the tab shows: the final one
    assert last.value == pytest.approx(summary["metrics"]["val/loss"])


def test_a_normal_run_prints_no_warnings(many_loggers_run):
    _, output, stderr = many_loggers_run
    assert output.count("GPU available:") == 1  # Lightning's lines once, through Hydra's log
    assert "━" not in output and "Epoch 0" not in output  # no progress bar into a pipe
    assert "Total params" in output and "FLOPs" not in output  # the summary, less its FLOPs
    assert "warn" not in stderr.lower(), stderr
    assert "LeafSpec" not in output and "💡" not in output and "limit_val_batches" not in output


def test_a_cooldown_that_max_epochs_cuts_short_is_warned_of(tiny_overrides, tmp_path):
    # ~35 batches per epoch: one epoch ends the run long before the 200-step budget's cooldown
    args = [*without(tiny_overrides, "trainer.max_steps", "trainer.val_"), "trainer.max_epochs=1"]
    args += ["trainer.max_steps=200", "scheduler.cooldown=100", f"hydra.run.dir={tmp_path / 'run'}"]
    result = run_train(args, cwd=tmp_path)
    output = result.stdout + result.stderr
    assert "of trainer.max_steps=200" in output and "cooldown of 100 steps did not finish" in output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert f"training stopped at optimizer step {summary['steps']} " in output
