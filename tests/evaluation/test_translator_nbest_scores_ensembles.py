"""The Translator's n-best lists, reference scores and ensembles, on the tiny checkpoint."""

import io

import pytest

from tests.helpers.tiny_checkpoint import MODEL_MAX_LEN, checkpoint_model, write_checkpoint
from transformer_nmt.checkpoint import CheckpointError, load_checkpoint
from transformer_nmt.cli.errors import InputError
from transformer_nmt.cli.translate import score_stream, translate_interactively, translate_stream
from transformer_nmt.decoding import nbest_token_ids, score_token_ids
from transformer_nmt.evaluation import Translator
from transformer_nmt.evaluation.translator import ReferenceTooLongError

OPTIONS = dict(beam_size=3, max_len_b=8, batch_size=3)
LINES = ["A man plays.", "", "A dog runs in the park.", "   ", "Two children eat."]


@pytest.fixture(scope="module")
def checkpoint(workspace):
    return load_checkpoint(workspace.ckpt_path)


def test_a_1_best_list_holds_the_translation_and_the_beams_score(checkpoint):
    translator = Translator.from_checkpoint(checkpoint, nbest=1, **OPTIONS)
    one_best = translator.translate_nbest(LINES)
    assert [[entry.text for entry in entries] for entries in one_best] == [
        [text] for text in translator.translate(LINES)
    ]
    sources = translator.encode([LINES[0]])
    (hypotheses,) = nbest_token_ids(checkpoint.model, sources, checkpoint.bos_id,
                                    checkpoint.eos_id, nbest=1, **OPTIONS)  # fmt: skip
    assert one_best[0][0].score == pytest.approx(hypotheses[0].score)


def test_an_n_best_list_is_ordered_and_blank_lines_get_one_empty_entry(checkpoint):
    nbest = Translator.from_checkpoint(checkpoint, nbest=3, **OPTIONS).translate_nbest(LINES)
    for line, entries in zip(LINES, nbest, strict=True):
        if not line.strip():
            assert [(e.text, e.score) for e in entries] == [("", 0.0)]
            continue
        assert len(entries) == 3
        scores = [e.score for e in entries]
        assert scores == sorted(scores, reverse=True) and scores[0] < 0


def test_a_checkpoint_ensembled_with_itself_translates_as_alone(checkpoint):
    alone = Translator.from_checkpoint(checkpoint, nbest=2, **OPTIONS)
    twice = Translator.from_checkpoints([checkpoint, checkpoint], nbest=2, **OPTIONS)
    assert isinstance(twice.model, list) and len(twice.model) == 2
    assert twice.translate(LINES) == alone.translate(LINES)
    assert twice.translate_nbest(LINES) == alone.translate_nbest(LINES)
    references = ["Ein Mann spielt.", "", "Ein Hund.", "Hallo", "Zwei Kinder essen."]
    assert twice.score_references(LINES, references) == alone.score_references(LINES, references)


def test_checkpoints_of_other_tokenizers_do_not_ensemble(
    checkpoint, workspace, other_tokenizer_dir, tmp_path
):
    model = checkpoint_model(len(workspace.tokenizer), workspace.tokenizer.pad_token_id, seed=1)
    other = load_checkpoint(write_checkpoint(tmp_path / "other.ckpt", model, other_tokenizer_dir))
    with pytest.raises(CheckpointError) as error:
        Translator.from_checkpoints([checkpoint, other])
    message = str(error.value)
    assert message.startswith(f"cannot ensemble {other.path} with {checkpoint.path}: ")
    assert f"different tokenizers ('{workspace.tokenizer_dir}' and '{other_tokenizer_dir}')" in (
        message
    )
    assert "another vocabulary or segmentation" in message


def test_reference_scores_are_forced_decoding_of_the_encoded_pairs(checkpoint):
    translator = Translator.from_checkpoint(checkpoint, **OPTIONS)
    references = ["Ein Mann spielt.", "", "Ein Hund rennt.", "Hallo", "Zwei Kinder essen."]
    scores = translator.score_references(LINES, references)
    sources = translator.encode([line.strip() for line in LINES])
    targets = [translator.tokenizer.encode(r, add_special_tokens=False) for r in references]
    expected = score_token_ids(
        checkpoint.model, sources, targets, checkpoint.bos_id, checkpoint.eos_id
    )
    for score, target, tokens in zip(scores, targets, expected, strict=True):
        assert score.token_log_probs == pytest.approx(tokens, abs=1e-6)
        assert len(score.token_log_probs) == len(target) + 1  # and the EOS
        assert score.log_prob == pytest.approx(sum(score.token_log_probs))
        assert score.log_prob < 0


def test_references_that_do_not_fit_are_refused_naming_the_line(checkpoint):
    translator = Translator.from_checkpoint(checkpoint, **OPTIONS)
    long_reference = " ".join(["der kleine rote Hund rennt im Park"] * 6)
    with pytest.raises(ReferenceTooLongError, match="^reference line 12 has [0-9]+ tokens"):
        translator.score_references(["A.", "B."], ["Ein.", long_reference], first_line_number=11)
    with pytest.raises(ValueError, match="2 lines but 1 references"):
        translator.score_references(["A.", "B."], ["Ein."])
    with pytest.raises(ReferenceTooLongError, match=f"scores at most {MODEL_MAX_LEN - 1} "):
        translator.score_references(["A."], [long_reference])


def test_translate_stream_writes_n_best_lines_numbered_across_chunks(checkpoint):
    translator = Translator.from_checkpoint(checkpoint, nbest=2, **OPTIONS)
    output = io.StringIO()
    assert translate_stream(translator, LINES, output, chunk_lines=2) == len(LINES)
    expected = [
        f"{i} ||| {entry.text} ||| {entry.score:.4f}"
        for i, entries in enumerate(translator.translate_nbest(LINES))
        for entry in entries
    ]
    assert output.getvalue().splitlines() == expected
    assert [int(line.split(" ||| ")[0]) for line in expected] == [0, 0, 1, 2, 2, 3, 4, 4]
    assert expected[2] == "1 |||  ||| 0.0000"


def test_the_interactive_prompt_answers_with_n_best_lines(checkpoint):
    translator = Translator.from_checkpoint(checkpoint, nbest=2, **OPTIONS)
    output, prompts = io.StringIO(), io.StringIO()
    translate_interactively(translator, io.BytesIO(b"A dog.\nA man plays.\n"), output, prompts)
    written = [line.split(" ||| ") for line in output.getvalue().splitlines()]
    assert [row[0] for row in written] == ["0", "0", "1", "1"]
    assert [row[1] for row in written[2:]] == [
        e.text for e in translator.translate_nbest(["A man plays."])[0]
    ]


def test_score_stream_writes_one_line_per_reference(checkpoint):
    translator = Translator.from_checkpoint(checkpoint, **OPTIONS)
    references = ["Ein Mann spielt.", "", " Ein Hund rennt. ", "Hallo", "Zwei Kinder essen."]
    output = io.StringIO()
    assert score_stream(translator, LINES, references, output) == len(LINES)
    rows = [line.split(" ||| ") for line in output.getvalue().splitlines()]
    scores = translator.score_references(LINES, references)
    assert [row[:2] for row in rows] == [[str(i), r.strip()] for i, r in enumerate(references)]
    for row, score in zip(rows, scores, strict=True):
        assert row[2] == f"{score.log_prob:.4f}"
        assert row[3].split() == [f"{p:.4f}" for p in score.token_log_probs]
    with pytest.raises(InputError, match="the input has 5 lines but the references have 4"):
        score_stream(translator, LINES, references[:4], io.StringIO())
