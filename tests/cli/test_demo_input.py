"""Bad input to the demo page and to ``demo.py``: a message on the page naming the problem and
the fix (never a traceback), the next request served as usual; one ``error:`` at start for a
model that cannot be loaded."""

import importlib.util
import logging

import pytest
from omegaconf import OmegaConf

from tests.helpers import run_if as run_if_module
from tests.helpers.tiny_checkpoint import MODEL_MAX_LEN
from transformer_nmt.checkpoint import CheckpointError, load_checkpoint
from transformer_nmt.cli.demo import check_page_libraries, demo_command, load_demo_model
from transformer_nmt.cli.errors import USER_ERRORS, UsageError, exit_on_user_error
from transformer_nmt.decoding import SearchOptions
from transformer_nmt.demo.models import CheckpointModel
from transformer_nmt.demo.page import _translate
from transformer_nmt.demo.source_text import RejectedText, check_source_text
from transformer_nmt.export.errors import MissingDependencyError


@pytest.fixture(scope="module")
def demo_model(workspace) -> CheckpointModel:
    return CheckpointModel(load_checkpoint(workspace.ckpt_path), SearchOptions(max_len_b=5))


@pytest.mark.parametrize("text", [None, "", "   ", "\n\t\n"])
def test_an_empty_box_asks_for_a_sentence(text):
    with pytest.raises(RejectedText, match="the input box is empty: type a sentence"):
        check_source_text(text, max_words=200)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a dog\x07 runs", "character 6 is the control character U+0007; remove it"),
        ("\x1b[31mred", "character 1 is the control character U+001B"),
        ("caf\ufffd au lait", "character 4 is not valid text (U+FFFD: the text was not UTF-8"),
        ("caf\udce9", "character 4 is not valid text (U+DCE9"),
    ],
)
def test_control_characters_and_broken_text_are_named_by_position(text, message):
    with pytest.raises(RejectedText, match="paste it again as UTF-8|remove it") as caught:
        check_source_text(text, max_words=200)
    assert message in str(caught.value)


def test_a_long_paste_names_its_length_the_limit_and_translate_py():
    with pytest.raises(RejectedText) as caught:
        check_source_text("word " * 1000, max_words=200)
    assert str(caught.value).startswith("the text has 1000 words; this page translates up to 200")
    assert "python translate.py" in str(caught.value)


def test_line_breaks_and_tabs_read_as_spaces_and_outer_spaces_go():
    assert check_source_text("  A dog\n runs\tfast. \r\n", max_words=4) == "A dog  runs fast."


def test_bad_input_gets_a_message_and_the_next_request_is_answered(demo_model):
    error, translation = _translate(demo_model, "", 2, 0.6, max_words=200)
    assert translation is None and error.startswith("the input box is empty")
    error, translation = _translate(demo_model, "word " * 1000, 2, 0.6, max_words=200)
    assert translation is None and error.startswith("the text has 1000 words")
    error, translation = _translate(demo_model, "A dog runs.", 2, 0.6, max_words=200)
    assert error is None and 1 <= len(translation.candidates) <= 2


@pytest.mark.parametrize(
    ("beam", "alpha", "message"),
    [(0, 0.6, "beam size must be 1 to"), (10**6, 0.6, "beam size must be 1 to"),
     (2, -1, "length penalty α must be 0 to 10"), (2, None, "length penalty α must be 0 to 10")],
)  # fmt: skip
def test_out_of_range_search_options_get_a_message(demo_model, beam, alpha, message):
    error, translation = _translate(demo_model, "A dog runs.", beam, alpha, max_words=200)
    assert translation is None and error.startswith(message)


def test_a_failing_model_gives_a_message_the_log_a_traceback_and_the_server_goes_on(
    demo_model, monkeypatch, caplog
):
    search = demo_model.search

    def fail_once(*args):
        monkeypatch.setattr(demo_model, "search", search)
        raise RuntimeError("out of memory")

    monkeypatch.setattr(demo_model, "search", fail_once)
    with caplog.at_level(logging.ERROR):
        error, translation = _translate(demo_model, "A dog runs.", 2, 0.6, max_words=200)
    assert translation is None
    assert error == "the model failed on this input (the server's log has the details)"
    assert "Traceback" not in error and "out of memory" not in error
    assert any("out of memory" in str(record.exc_info[1]) for record in caplog.records)
    error, translation = _translate(demo_model, "A dog runs.", 2, 0.6, max_words=200)
    assert error is None and translation.candidates


def test_a_source_over_the_model_length_is_cut_and_says_so(demo_model):
    error, translation = _translate(demo_model, "dog " * 100, 1, 0.6, max_words=200)
    assert error is None
    assert len(translation.source_ids) == MODEL_MAX_LEN
    assert translation.source_tokens_cut == 100 + 1 - MODEL_MAX_LEN


def demo_config(**keys):
    fields = {"ckpt_path": None, "hf_dir": None, "model_dir": None, "tokenizer_dir": None,
              "host": "127.0.0.1", "port": 7860, "max_words": 200, "threads": 1}  # fmt: skip
    return OmegaConf.create(
        {**fields, "device": "cpu", "search": OmegaConf.structured(SearchOptions()), **keys}
    )


@pytest.mark.parametrize("keys", [{}, {"ckpt_path": "a.ckpt", "model_dir": "ct2"}])
def test_not_exactly_one_model_is_a_usage_error(keys):
    with pytest.raises(UsageError, match="exactly one of ckpt_path=.* hf_dir=.* model_dir="):
        load_demo_model(demo_config(**keys))


def test_a_missing_or_corrupt_checkpoint_is_one_user_error(tmp_path, workspace):
    with pytest.raises(CheckpointError, match="does not exist") as missing:
        load_demo_model(demo_config(ckpt_path=str(tmp_path / "none.ckpt")))
    corrupt = tmp_path / "corrupt.ckpt"
    corrupt.write_bytes(workspace.ckpt_path.read_bytes()[:5000])
    with pytest.raises(CheckpointError, match="is not a PyTorch checkpoint") as broken:
        load_demo_model(demo_config(ckpt_path=str(corrupt)))
    for caught in (missing, broken):
        assert isinstance(caught.value, USER_ERRORS) and "\n" not in str(caught.value)


def test_demo_py_stops_at_start_with_one_error_line_for_a_corrupt_checkpoint(
    tmp_path, workspace, capsys
):
    corrupt = tmp_path / "corrupt.ckpt"
    corrupt.write_bytes(workspace.ckpt_path.read_bytes()[:5000])
    with pytest.raises(SystemExit) as stopped:
        exit_on_user_error(demo_command, demo_config(ckpt_path=str(corrupt)))
    lines = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 1 and "Traceback" not in "\n".join(lines)
    assert lines[-1].startswith(f"error: {corrupt} is not a PyTorch checkpoint")
    assert sum(line.startswith("error: ") for line in lines) == 1


@pytest.mark.parametrize(
    ("keys", "message"),
    [({"port": 0}, "port must be 1 to 65535, got 0"),
     ({"max_words": 0}, "max_words must be a positive integer, got 0"),
     ({"threads": 0}, "threads must be a positive integer, got 0")],
)  # fmt: skip
def test_demo_py_options_out_of_range_are_usage_errors(workspace, keys, message):
    with pytest.raises(UsageError, match=message):
        demo_command(demo_config(ckpt_path=str(workspace.ckpt_path), **keys))


def test_a_missing_hf_folder_is_one_user_error(tmp_path):
    with pytest.raises(CheckpointError, match="cannot load the Hugging Face model"):
        load_demo_model(demo_config(hf_dir=str(tmp_path / "no-such-folder")))


def test_without_gradio_the_demo_says_what_to_install(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "gradio" else find_spec(name)
    )
    with pytest.raises(
        MissingDependencyError, match=r'pip install -e "\.\[demo\]" \(missing: gradio\)'
    ):
        check_page_libraries()


def test_without_chromium_the_browser_test_is_skipped_saying_what_to_install(monkeypatch):
    monkeypatch.setattr(run_if_module.shutil, "which", lambda name: None)
    mark = run_if_module.run_if(chromium=True)
    assert mark.args == (True,)
    assert "apt-get install chromium chromium-driver" in mark.kwargs["reason"]
