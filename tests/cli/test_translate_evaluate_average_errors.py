"""Bad input to translate.py, evaluate.py and average_checkpoints.py: one ``error:`` line naming
the line or both tokenizers, exit status 1, and nothing half-written."""

import pytest
import torch

from tests.helpers.commands import run_script
from tests.helpers.tiny_checkpoint import checkpoint_model, write_checkpoint

pytestmark = pytest.mark.slow  # every test starts a process

LINES = 2100  # past the first chunk of 1000 lines that translate.py used to write before failing


def assert_one_error(result, *fragments: str) -> str:
    """The command failed with one ``error:`` line holding ``fragments``, and no traceback."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1, result.stderr
    assert lines[-1].startswith("error: ") and "Traceback" not in result.stderr
    assert sum(line.startswith("error: ") for line in lines) == 1
    for fragment in fragments:
        assert fragment in lines[-1]
    return lines[-1]


def latin1_at(line_number: int, count: int = LINES) -> bytes:
    """``count`` lines of valid text but one, which holds a Latin-1 byte."""
    lines = [b"A dog runs in the park."] * count
    lines[line_number - 1] = b"A caf\xe9 in the park."
    return b"".join(line + b"\n" for line in lines)


@pytest.mark.parametrize(
    ("bad_line", "as_file"), [(1500, True), (1500, False), (1, False)], ids=["file", "pipe", "1"]
)
def test_input_that_is_not_utf8_writes_nothing_and_names_the_line(
    tmp_path, workspace, bad_line, as_file
):
    data = latin1_at(bad_line)
    if as_file:
        (tmp_path / "input.en").write_bytes(data)
    stdin = tmp_path / "input.en" if as_file else data
    ckpt = f"ckpt_path={workspace.ckpt_path}"
    result = run_script("translate.py", ckpt, cwd=tmp_path, stdin=stdin)
    assert_one_error(
        result, f"input line {bad_line} is not valid UTF-8: byte 6 of the line is 0xe9",
        "nothing was translated", "input_errors=replace",
    )  # fmt: skip
    assert result.stdout == ""


def test_input_errors_replace_translates_every_line_with_a_warning(tmp_path, workspace):
    data = latin1_at(3, count=40)
    result = run_script(
        "translate.py", f"ckpt_path={workspace.ckpt_path}", "input_errors=replace",
        "search.beam_size=1", "search.max_len_b=4", cwd=tmp_path, stdin=data,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 40
    assert "input line 3 is not valid UTF-8 (byte 6 of the line is 0xe9" in result.stderr


def test_translate_refuses_another_tokenizer_of_the_same_size(
    tmp_path, workspace, other_tokenizer_dir
):
    ckpt = write_checkpoint(
        tmp_path / "model.ckpt", workspace.model, workspace.tokenizer_dir, as_trained=True
    )
    result = run_script(
        "translate.py", f"ckpt_path={ckpt}", f"tokenizer_dir={other_tokenizer_dir}",
        cwd=tmp_path, stdin="A dog runs.\n",
    )  # fmt: skip
    assert_one_error(
        result, f"tokenizer '{other_tokenizer_dir}' is not the one checkpoint {ckpt} was trained",
        f"the checkpoint's own is '{workspace.tokenizer_dir}'",
    )  # fmt: skip
    assert result.stdout == ""


def test_evaluate_refuses_another_tokenizer_of_the_same_size(
    tmp_path, workspace, other_tokenizer_dir
):
    ckpt = write_checkpoint(
        tmp_path / "model.ckpt", workspace.model, workspace.tokenizer_dir, as_trained=True
    )
    out = tmp_path / "run"
    result = run_script(
        "evaluate.py", f"ckpt_path={ckpt}", f"tokenizer_dir={other_tokenizer_dir}", "data=multi30k",
        f"data.data_dir={workspace.corpus_dir}", f"hydra.run.dir={out}", cwd=tmp_path,
    )  # fmt: skip
    assert_one_error(result, f"tokenizer '{other_tokenizer_dir}'", f"'{workspace.tokenizer_dir}'")
    assert not list(out.glob("hyps.*")) and not list(out.glob("scores.*"))
    assert "Traceback" in (out / "evaluate.log").read_text()  # the log file keeps the details


def test_average_refuses_other_tokenizers_shapes_and_unwritable_outputs(
    tmp_path, workspace, other_tokenizer_dir
):
    ours = write_checkpoint(
        tmp_path / "a.ckpt", workspace.model, workspace.tokenizer_dir, as_trained=True
    )
    theirs = write_checkpoint(
        tmp_path / "b.ckpt", workspace.model, other_tokenizer_dir, as_trained=True
    )
    wider = write_checkpoint(
        tmp_path / "c.ckpt", checkpoint_model(len(workspace.tokenizer), 0), workspace.tokenizer_dir
    )
    wide = torch.load(wider, weights_only=False)
    wide["state_dict"]["model.output_projection.weight"] = torch.zeros(120, 40)
    torch.save(wide, wider)
    (tmp_path / "blocked").write_text("a file where a directory should be")

    def average(*inputs, output="avg.ckpt"):
        listed = ",".join(f"'{path}'" for path in inputs)
        return run_script(
            "average_checkpoints.py", f"inputs=[{listed}]", f"output={output}", cwd=tmp_path
        )

    assert_one_error(
        average(ours, theirs), "they were trained with different tokenizers",
        f"'{other_tokenizer_dir}' and '{workspace.tokenizer_dir}'",
    )  # fmt: skip
    assert_one_error(
        average(ours, wider), "weight 'model.output_projection.weight' has shape (120, 40)"
    )
    assert_one_error(
        average(ours, ours, output="blocked/avg.ckpt"),
        f"cannot write {tmp_path}/blocked/avg.ckpt: Not a directory; choose another output=",
    )  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.ckpt", "b.ckpt", "blocked", "c.ckpt"]
