"""The command-line tools, run as a user would: in a subprocess, from another directory."""

import json

import pytest
import sacrebleu
import torch

from tests.helpers.commands import run_script
from tests.helpers.tiny_checkpoint import TOKENIZER_VOCAB_SIZE, checkpoint_model, write_checkpoint
from transformer_nmt.checkpoint import load_checkpoint
from transformer_nmt.evaluation import Translator

pytestmark = pytest.mark.slow  # every test starts a process


def test_translate_keeps_one_line_per_line_and_stdout_clean(tmp_path, workspace):
    long_line = " ".join(["the small red dog runs in the park"] * 6)
    lines = ["A man plays with the ball.", "", "A dog runs.", long_line, "   ", "Two children."]
    result = run_script(
        "translate.py", f"ckpt_path={workspace.ckpt_path}",
        "search.beam_size=2", "search.max_len_b=6", cwd=tmp_path, stdin="\n".join(lines) + "\n",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    outputs = result.stdout.split("\n")
    assert outputs[-1] == "" and len(outputs) == len(lines) + 1
    assert outputs[1] == "" and outputs[4] == ""
    assert all(outputs[i] for i in (0, 2, 3, 5))  # the untrained model still outputs something
    translator = Translator.from_checkpoint(
        load_checkpoint(workspace.ckpt_path), beam_size=2, max_len_b=6
    )
    assert outputs[:-1] == translator.translate(lines)  # stdout holds translations only
    assert "line 4 has" in result.stderr and "translating only" in result.stderr
    assert list(tmp_path.iterdir()) == []  # no outputs/ directory, no log file


def test_translate_prints_n_best_lists_of_an_ensemble(tmp_path, workspace):
    lines = ["A man plays with the ball.", "", "A dog runs."]
    ckpt = workspace.ckpt_path
    result = run_script(
        "translate.py", f"ckpt_path=[{ckpt},{ckpt}]", "search.beam_size=3", "search.nbest=2",
        "search.max_len_b=6", cwd=tmp_path, stdin="\n".join(lines) + "\n",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    # a model ensembled with itself is the model: its n-best lists, in the documented format
    translator = Translator.from_checkpoint(
        load_checkpoint(ckpt), beam_size=3, nbest=2, max_len_b=6
    )
    expected = [
        f"{i} ||| {entry.text} ||| {entry.score:.4f}"
        for i, entries in enumerate(translator.translate_nbest(lines))
        for entry in entries
    ]
    assert result.stdout.splitlines() == expected
    assert [line.split(" ||| ")[0] for line in expected] == ["0", "0", "1", "2", "2"]


def test_translate_scores_references(tmp_path, workspace):
    lines = ["A man plays with the ball.", "A dog runs."]
    references = ["Ein Mann spielt mit dem Ball.", "Ein Hund rennt."]
    (tmp_path / "refs.de").write_text("\n".join(references) + "\n", encoding="utf-8")
    result = run_script(
        "translate.py", f"ckpt_path={workspace.ckpt_path}", "score_references=true",
        "references=refs.de", cwd=tmp_path, stdin="\n".join(lines) + "\n",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    scores = Translator.from_checkpoint(load_checkpoint(workspace.ckpt_path)).score_references(
        lines, references
    )
    rows = [line.split(" ||| ") for line in result.stdout.splitlines()]
    assert [row[:2] for row in rows] == [["0", references[0]], ["1", references[1]]]
    for row, score in zip(rows, scores, strict=True):
        assert float(row[2]) == pytest.approx(score.log_prob, abs=1e-4)
        assert [float(x) for x in row[3].split()] == pytest.approx(score.token_log_probs, abs=1e-4)


def test_evaluate_prints_scores_and_writes_hypotheses_and_json(tmp_path, workspace):
    out = tmp_path / "run"
    result = run_script(
        "evaluate.py", f"ckpt_path={workspace.ckpt_path}", "data=multi30k",
        f"data.data_dir={workspace.corpus_dir}", f"data.cache_dir={tmp_path / 'cache'}",
        "split=test", "search.beam_size=2", "search.max_len_b=6", f"hydra.run.dir={out}",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    stdout = result.stdout.splitlines()
    assert stdout[0].startswith("BLEU = ") and "tok:13a" in stdout[0]
    assert stdout[1].startswith("chrF2 = ") and len(stdout) == 2  # logs go to stderr
    scores = json.loads((out / "scores.test.json").read_text())
    hypotheses = (out / "hyps.test.txt").read_text(encoding="utf-8").split("\n")[:-1]
    references = [tgt for _, tgt in workspace.pairs["test"]]
    assert scores["n_sentences"] == len(hypotheses) == len(references)
    assert 0 <= scores["bleu"] <= 100
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hypotheses, [references]).score)
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert scores["search"]["beam_size"] == 2 and scores["search"]["length_penalty"] == 0.6
    assert scores["ckpt"] == str(workspace.ckpt_path) and scores["decode_seconds"] >= 0
    assert not (tmp_path / "cache").exists()  # no tokenizer was trained for evaluation


def test_average_checkpoints_writes_a_checkpoint_the_tools_accept(tmp_path, workspace):
    paths = [
        write_checkpoint(
            tmp_path / f"epoch={i}-step={i}.ckpt",
            checkpoint_model(TOKENIZER_VOCAB_SIZE, 0, seed=i),
            workspace.tokenizer_dir,
        )
        for i in range(2)
    ]
    result = run_script(
        "average_checkpoints.py", f"inputs=['{paths[0]}','{paths[1]}']", "output=avg.ckpt",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    averaged = load_checkpoint(tmp_path / "avg.ckpt")
    first, second = (load_checkpoint(p).model.state_dict() for p in paths)
    for key, value in averaged.model.state_dict().items():
        torch.testing.assert_close(value, (first[key] + second[key]) / 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "avg.ckpt",
        "epoch=0-step=0.ckpt",
        "epoch=1-step=1.ckpt",
    ]


def test_a_missing_checkpoint_gives_one_clear_error(tmp_path):
    missing = tmp_path / "no_such.ckpt"
    result = run_script(
        "evaluate.py", f"ckpt_path={missing}", f"hydra.run.dir={tmp_path}", cwd=tmp_path
    )
    stderr = result.stderr.strip()
    assert result.returncode == 1
    assert stderr == (
        f"error: checkpoint {missing} does not exist; "
        f"expected a .ckpt written by this project's train.py"
    )
    assert result.stdout == ""


def test_a_foreign_checkpoint_gives_one_clear_error(tmp_path):
    foreign = tmp_path / "foreign.ckpt"
    torch.save({"state_dict": {"layer.weight": torch.zeros(1)}, "hyper_parameters": {}}, foreign)
    result = run_script("translate.py", f"ckpt_path={foreign}", cwd=tmp_path, stdin="Hello.\n")
    stderr = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(stderr) == 1
    assert stderr[0].startswith(f"error: {foreign} is not a transformer-nmt checkpoint")
    assert "Traceback" not in result.stderr


def test_a_beam_too_large_for_the_vocabulary_gives_one_clear_error(tmp_path, workspace):
    result = run_script(
        "translate.py", f"ckpt_path={workspace.ckpt_path}", "search.beam_size=5000",
        cwd=tmp_path, stdin="A dog runs.\n",
    )  # fmt: skip
    stderr = result.stderr.strip().splitlines()
    assert result.returncode == 1 and "Traceback" not in result.stderr
    largest = (TOKENIZER_VOCAB_SIZE - 2) // 2  # pad and BOS are never output
    assert stderr[-1] == (
        f"error: search.beam_size=5000 is too large for this model's {TOKENIZER_VOCAB_SIZE}-token "
        f"target vocabulary: beam search ranks 2·beam_size continuations per step; use at most "
        f"{largest}"
    )
    assert result.stdout == ""


def test_an_evaluate_sweep_prints_one_row_of_scores_per_length_penalty(tmp_path, workspace):
    sweep = tmp_path / "sweep"
    result = run_script(
        "evaluate.py", "-m", f"ckpt_path={workspace.ckpt_path}", "data=multi30k",
        f"data.data_dir={workspace.corpus_dir}", "split=val", "search.beam_size=2",
        "search.max_len_b=6", "search.length_penalty=0.0,1.5", f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    references = [tgt for _, tgt in workspace.pairs["val"]]
    table = (sweep / "scores.md").read_text()
    assert table.strip() in result.stdout  # printed when the sweep ends
    rows = [line.split(" | ") for line in table.splitlines()[2:]]
    assert [row[0].strip("| ") for row in rows] == ["0.0", "1.5"]
    for job, row in zip(("0", "1"), rows, strict=True):
        scores = json.loads((sweep / job / "scores.val.json").read_text())
        hypotheses = (sweep / job / "hyps.val.txt").read_text(encoding="utf-8").split("\n")[:-1]
        bleu = sacrebleu.corpus_bleu(hypotheses, [references])
        assert scores["search"]["length_penalty"] == float(row[0].strip("| "))
        assert scores["brevity_penalty"] == pytest.approx(bleu.bp)
        assert scores["length_ratio"] == pytest.approx(bleu.ratio)
        assert row[1:5] == ["val", row[2], f"{bleu.bp:.3f}", f"{bleu.ratio:.3f}"]
        assert row[2].strip("*") == f"{bleu.score:.2f}"
    best = max(float(row[2].strip("*")) for row in rows)
    assert all(row[2].startswith("**") == (float(row[2].strip("*")) == best) for row in rows)
