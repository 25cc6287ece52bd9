"""train.py on bad input: one ``error:`` line (exit 1) found before any data work, the traceback
in train.log, summary.json saying failed; resuming refuses another tokenizer or model size."""

import json
import re

import pytest
import torch

from tests.helpers.commands import run_script, run_train
from tests.helpers.corpus import make_pairs, write_corpus
from tests.helpers.slow import slow_fixture
from tests.helpers.tiny_runs import without

pytestmark = pytest.mark.slow  # every test starts train.py


def failed_run(result, run_dir, *fragments: str) -> str:
    """Check train.py failed with one ``error:`` line holding ``fragments``, no traceback on the
    console, the traceback in train.log and the error in summary.json; returns the line."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1, result.stderr[-3000:]
    assert lines[-1].startswith("error: ") and "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[-1]
    message = lines[-1].removeprefix("error: ")
    log = (run_dir / "train.log").read_text()
    assert "Traceback (most recent call last)" in log and message in log
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and message in summary["error"]
    assert not list(run_dir.glob("checkpoints/*.ckpt"))
    return message


CONFIG_ERRORS = {
    "heads": (["model.n_heads=3"], "model: d_model (32) must be divisible by n_heads (3)"),
    "search": (["search.beam_size=0"], "search: beam_size must be a positive integer, got 0"),
    "trainer": (["+trainer.precison=16"], "unknown trainer option(s) ['precison']"),
    "added key": (
        ["+label_smothing=0.2"],
        "+label_smothing: there is no top-level key 'label_smothing', so nothing would read it",
    ),
    "unwritable": (
        ["callbacks.last_checkpoint.dirpath={blocked}/checkpoints"],
        "cannot write into {blocked}/checkpoints, the last.ckpt directory (dirpath): Not a "
        "directory",
    ),
}
if not torch.cuda.is_available():
    CONFIG_ERRORS["no gpu"] = (
        ["trainer.accelerator=gpu"],
        "trainer.accelerator=gpu but PyTorch sees no GPU here; use trainer=cpu, or "
        "trainer.accelerator=auto",
    )


@pytest.mark.parametrize("case", CONFIG_ERRORS)
def test_config_errors_stop_before_any_data_work(tiny_overrides, tmp_path, case):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where a directory should be")
    overrides, expected = CONFIG_ERRORS[case]
    overrides = [o.format(blocked=blocked) for o in overrides]
    cache, run_dir = tmp_path / "cache", tmp_path / "run"
    args = [*without(tiny_overrides, "data.cache_dir"), f"data.cache_dir={cache}", *overrides]
    result = run_script("train.py", *args, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    failed_run(result, run_dir, expected.format(blocked=blocked))
    assert not cache.exists()  # the corpus was not read, no BPE trained


def test_a_beam_the_vocabulary_cannot_take_stops_before_training(tiny_overrides, tmp_path):
    """Found once the vocabulary is known, not after training when the final evaluation decodes."""
    run_dir = tmp_path / "run"
    args = [*tiny_overrides, "search.beam_size=100", f"hydra.run.dir={run_dir}"]
    result = run_script("train.py", *args, cwd=tmp_path)
    failed_run(
        result, run_dir, "search.beam_size=100 is too large for this model's 120-token target "
        "vocabulary", "use at most 59",
    )  # fmt: skip


@slow_fixture(scope="module")
def trained_run(tiny_overrides, tmp_path_factory):
    """Four steps of the tiny model; its last.ckpt is resumed from below."""
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    run_train(
        [*tiny_overrides, "trainer.max_steps=4", f"hydra.run.dir={run_dir}"], cwd=run_dir.parent
    )
    return run_dir / "checkpoints" / "last.ckpt"


def test_resuming_on_another_corpus_is_refused_naming_both_tokenizers(
    tiny_overrides, trained_run, tmp_path
):
    other_corpus = write_corpus(
        tmp_path / "corpus",
        {
            "train": make_pairs(400, seed=7),
            "val": make_pairs(40, seed=8),
            "test": make_pairs(40, 9),
        },
    )  # capitalised sentences: another BPE of the same size
    args = [*without(tiny_overrides, "data.data_dir"), f"data.data_dir={other_corpus}"]
    args += [f"ckpt_path={trained_run}", "trainer.max_steps=6"]
    trained_with = torch.load(trained_run, weights_only=False)["hyper_parameters"]["tokenizer_dir"]
    result = run_script("train.py", *args, f"hydra.run.dir={tmp_path / 'refused'}", cwd=tmp_path)
    message = failed_run(
        result, tmp_path / "refused", f"cannot resume from {trained_run}",
        f"trained with tokenizer '{trained_with}' but the data config gives tokenizer",
        "same size (120 tokens) but another vocabulary",
    )  # fmt: skip

    # the way out the message gives: keep the checkpoint's tokenizer for the new corpus
    keep = re.search(r"(data\.tokenizer=pretrained data\.tokenizer_name=\S+)$", message).group(1)
    resumed = tmp_path / "resumed"
    run_train([*args, *keep.split(), f"hydra.run.dir={resumed}"], cwd=tmp_path)
    checkpoint = torch.load(resumed / "checkpoints" / "last.ckpt", weights_only=False)
    assert checkpoint["global_step"] == 6
    assert checkpoint["hyper_parameters"]["tokenizer_dir"] == trained_with


def test_resuming_with_another_model_size_says_what_to_change(
    tiny_overrides, trained_run, tmp_path
):
    args = [*tiny_overrides, "model.d_model=64", f"ckpt_path={trained_run}"]
    result = run_script("train.py", *args, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    failed_run(
        result, tmp_path / "run",
        "its model was trained with model.d_model=32 but this run's config has model.d_model=64",
        "resume with the options it was trained with (model.d_model=32)",
    )  # fmt: skip


def test_a_failing_job_of_a_multirun_fails_alone(tiny_overrides, tmp_path):
    sweep = tmp_path / "sweep"
    args = ["-m", *tiny_overrides, "model.n_heads=3,2", "trainer.max_steps=2"]
    result = run_script("train.py", *args, f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    error = "error: model: d_model (32) must be divisible by n_heads (3)"
    assert [line[: len(error)] for line in result.stderr.splitlines() if "error:" in line] == [
        error,  # when the job fails
        error,  # again at the end of the sweep: the exit status says a job failed
    ]
    failed = json.loads((sweep / "0" / "summary.json").read_text())
    assert failed["status"] == "failed" and "n_heads (3)" in failed["error"]
    assert "model.n_heads=3" in failed["overrides"]
    finished = json.loads((sweep / "1" / "summary.json").read_text())  # the next job still ran
    assert finished["status"] == "finished" and finished["steps"] == 2
