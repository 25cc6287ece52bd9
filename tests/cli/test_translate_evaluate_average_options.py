"""translate.py's options for n-best lists, reference scoring and ensembles: each misuse ends in
one ``error:`` line before anything is translated (run in-process, on the tiny checkpoint)."""

import pytest
from hydra import compose, initialize_config_dir

from tests.helpers.hydra_config import CONF_DIR
from tests.helpers.tiny_checkpoint import checkpoint_model, write_checkpoint
from transformer_nmt.cli.config_schemas import register_config_schemas
from transformer_nmt.cli.errors import exit_on_user_error
from transformer_nmt.cli.translate import read_references, translate_command


def translate_error(capsys, *overrides: str) -> str:
    """The one line translate.py prints to stderr when it exits with status 1."""
    register_config_schemas()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("translate", overrides=list(overrides))
    with pytest.raises(SystemExit) as exit_status:
        exit_on_user_error(translate_command, cfg)
    assert exit_status.value.code == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = [line for line in captured.err.splitlines() if line.startswith("error: ")]
    return line


def test_more_best_than_beams_is_one_error(capsys, workspace):
    line = translate_error(
        capsys, f"ckpt_path={workspace.ckpt_path}", "search.beam_size=2", "search.nbest=3"
    )
    assert line == (
        "error: search: nbest=3 is more than beam_size=2: a beam search keeps beam_size "
        "hypotheses per sentence; raise beam_size to at least 3 or lower nbest"
    )


def test_an_ensemble_of_two_tokenizers_is_one_error(
    capsys, tmp_path, workspace, other_tokenizer_dir
):
    model = checkpoint_model(len(workspace.tokenizer), workspace.tokenizer.pad_token_id, seed=1)
    other = write_checkpoint(tmp_path / "other.ckpt", model, other_tokenizer_dir)
    line = translate_error(capsys, f"ckpt_path=[{workspace.ckpt_path},{other}]")
    assert line.startswith(
        f"error: cannot ensemble {other} with {workspace.ckpt_path}: they were trained with "
        f"different tokenizers ('{workspace.tokenizer_dir}' and '{other_tokenizer_dir}')"
    )
    assert line.endswith(
        "ensemble only checkpoints of one tokenizer and direction, as an ensemble combines the "
        "models' log-probabilities token id by token id"
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["ckpt_path=[]"], "say which model to use: ckpt_path=path/to.ckpt (or an ensemble"),
        (["references=refs.de"], "references=refs.de is read only when scoring"),
        (["score_references=true"], "score_references=true needs the references"),
        (
            ["score_references=true", "references=refs.de", "search.nbest=2"],
            "search.nbest does not apply",
        ),
        (["score_references=true", "references=no/such/file"], "references file"),
        (["engine=ct2", "model_dir=x", "search.nbest=2"], "engine=ct2 returns the best"),
    ],
)
def test_misused_options_are_one_error_before_any_model_loads(capsys, overrides, message):
    line = translate_error(capsys, *overrides)
    assert message in line


def test_references_that_are_not_utf8_name_the_file_and_line(tmp_path):
    path = tmp_path / "refs.de"
    path.write_bytes(b"\xef\xbb\xbfEin Hund.\n\nEin Caf\xe9.\n")
    with pytest.raises(ValueError, match=f"^line 3 of references file {path} is not valid UTF-8"):
        read_references(path)
    path.write_bytes(b"\xef\xbb\xbfEin Hund.\n\nEin Caf\xc3\xa9.\n")
    assert read_references(path) == ["Ein Hund.", "", "Ein Café."]
