"""The Translator and translate.py's stream and interactive modes, on the tiny checkpoint."""

import io
import logging

import pytest

from tests.helpers.tiny_checkpoint import MODEL_MAX_LEN
from transformer_nmt.checkpoint import load_checkpoint
from transformer_nmt.cli.translate import translate_interactively, translate_stream
from transformer_nmt.decoding import translate_token_ids
from transformer_nmt.evaluation import Translator


@pytest.fixture(scope="module")
def translator(workspace) -> Translator:
    return Translator.from_checkpoint(
        load_checkpoint(workspace.ckpt_path), beam_size=2, max_len_b=8, batch_size=3
    )


def test_batched_translation_equals_one_line_at_a_time_in_input_order(translator, workspace):
    lines = [src for src, _ in workspace.pairs["val"]]
    batched = translator.translate(lines)
    assert batched == [translator.translate([line])[0] for line in lines]
    assert len(set(batched)) > 1  # distinct sentences, distinct outputs: order is tested


def test_translation_is_encode_decode_around_the_search(translator, workspace):
    lines = [src for src, _ in workspace.pairs["test"]]
    ids = translate_token_ids(
        translator.model, translator.encode(lines), translator.bos_id, translator.eos_id,
        beam_size=2, max_len_b=8,
    )  # fmt: skip
    assert translator.translate(lines) == [translator.tokenizer.decode(i).strip() for i in ids]
    assert all(source[-1] == translator.eos_id for source in translator.encode(lines))


def test_empty_and_blank_lines_give_empty_translations(translator):
    outputs = translator.translate(["", "A man plays.", "   ", "A dog."])
    assert outputs[0] == "" and outputs[2] == ""
    assert len(outputs) == 4


def test_overlong_lines_are_truncated_with_a_warning_naming_the_line(translator, caplog):
    long_line = " ".join(["the small red dog runs in the park"] * 6)
    with caplog.at_level(logging.WARNING):
        outputs = translator.translate(["", "A dog.", long_line], first_line_number=10)
    assert len(outputs) == 3
    (record,) = [r for r in caplog.records if "translating only" in r.message]
    assert record.message.startswith("line 12 has ")
    assert f"first {MODEL_MAX_LEN - 1}" in record.message
    (source,) = translator.encode([long_line])
    assert len(source) == MODEL_MAX_LEN


def test_translate_stream_writes_one_line_per_input_line(translator):
    lines = ["A man plays.\n", "\n", "A dog runs in the park.\n", "Two children"]
    output = io.StringIO()
    assert translate_stream(translator, lines, output, chunk_lines=2) == 4
    written = output.getvalue().split("\n")
    assert written[-1] == "" and len(written) == 5
    assert written[1] == ""
    assert written[:4] == translator.translate(lines)


def test_interactive_mode_prompts_on_its_own_stream_and_answers_each_line(translator):
    typed = io.BytesIO("A man plays.\n\nA dog.\nA \xff dog.\n".encode("latin-1"))
    output, prompts = io.StringIO(), io.StringIO()
    translate_interactively(translator, typed, output, prompts)
    assert output.getvalue().split("\n") == [
        *translator.translate(["A man plays.", "", "A dog."]),
        "",
    ]
    # one prompt per line, one at end of input; a line that is not UTF-8 gets an error instead
    assert prompts.getvalue().startswith("> > > > error: input line 4 is not valid UTF-8")
    assert prompts.getvalue().endswith("> \n")
