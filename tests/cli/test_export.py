"""export.py, translate.py / evaluate.py with engine=ct2, and train.py init_from=, run as a user
runs them: in a subprocess."""

import json

import pytest
import torch

from tests.helpers.commands import run_script, run_train
from transformer_nmt.checkpoint import load_checkpoint, model_state_dict, read_checkpoint

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]


def test_export_writes_each_format_and_refuses_to_overwrite(toys, tmp_path):
    ckpt = toys["pre"].checkpoint.path
    for arguments, kind in (
        (["format=hf", "output=hf"], "pegasus"),
        (["format=ct2", "quantization=int8", "output=ct2"], "ctranslate2"),
    ):
        result = run_script("export.py", f"ckpt_path={ckpt}", *arguments, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        directory = tmp_path / arguments[-1].removeprefix("output=")
        assert result.stdout == f"{directory}\n"
        assert "it/s]" not in result.stderr  # no progress bars of transformers (5.x draws two)
        metadata = json.loads((directory / "transformer_nmt.json").read_text())
        assert (metadata["format"], metadata["source"]) == (kind, str(ckpt))
    again = run_script("export.py", f"ckpt_path={ckpt}", "format=hf", "output=hf", cwd=tmp_path)
    assert again.returncode == 1
    assert again.stderr.strip().splitlines() == [
        f"error: output {tmp_path / 'hf'} already exists; add overwrite=true to replace it"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ct2", "hf"]


def test_a_shape_hf_cannot_hold_ends_in_one_error_line(workspace, tmp_path):
    from tests.helpers.tiny_checkpoint import write_checkpoint
    from transformer_nmt.model import Transformer

    config = workspace.model.config.to_dict() | {"positional": "learned"}
    learned = write_checkpoint(
        tmp_path / "learned.ckpt", Transformer(type(workspace.model.config)(**config)),
        workspace.tokenizer_dir,
    )  # fmt: skip
    result = run_script(
        "export.py", f"ckpt_path={learned}", "format=hf", "output=out", cwd=tmp_path
    )
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "error: cannot convert to Hugging Face marian: positional='learned' (Marian and Pegasus "
        "have fixed sinusoids only); export format=ct2 instead, which holds every shape of this "
        "project"
    ]
    assert not (tmp_path / "out").exists()


def test_translate_and_evaluate_take_a_ctranslate2_export(toys, ct2_dirs, workspace, tmp_path):
    toy = toys["post"]
    lines = [*toy.val_texts[:20], ""]
    results = {}
    for engine in (
        f"ckpt_path={toy.checkpoint.path}",
        f"engine=ct2 model_dir={ct2_dirs[('post', 'float32')]}",
    ):
        translated = run_script(
            "translate.py", *engine.split(), "search.beam_size=1", cwd=tmp_path,
            stdin="\n".join(lines) + "\n",
        )  # fmt: skip
        assert translated.returncode == 0, translated.stderr
        evaluated = run_script(
            "evaluate.py", *engine.split(), "data=multi30k",
            f"data.data_dir={workspace.corpus_dir}", f"data.cache_dir={tmp_path / 'cache'}",
            "search.beam_size=1", f"hydra.run.dir={tmp_path / engine[:6]}", cwd=tmp_path,
        )  # fmt: skip
        assert evaluated.returncode == 0, evaluated.stderr
        scores = json.loads((tmp_path / engine[:6] / "scores.test.json").read_text())
        results[engine[:6]] = (translated.stdout, evaluated.stdout, scores)
    (torch_text, torch_bleu, torch_scores), (ct2_text, ct2_bleu, ct2_scores) = results.values()
    assert ct2_text == torch_text and len(torch_text.split("\n")) == len(lines) + 1
    assert ct2_bleu == torch_bleu and torch_scores["bleu"] > 0  # same lines, same sacreBLEU call
    assert (ct2_scores["engine"], ct2_scores["ckpt"]) == ("ct2", None)
    assert ct2_scores["model_dir"] == str(ct2_dirs[("post", "float32")])
    not_an_export = run_script(
        "translate.py", "engine=ct2", f"model_dir={tmp_path}", cwd=tmp_path, stdin="A dog.\n"
    )
    assert not_an_export.returncode == 1
    assert not_an_export.stderr.startswith(f"error: {tmp_path} is not a CTranslate2 export")


def test_train_init_from_a_marian_folder_fine_tunes_it(tiny_overrides, marian_dir, tmp_path):
    from transformer_nmt.export import import_marian

    run_dir = tmp_path / "run"
    run_train(
        [*tiny_overrides, f"init_from={marian_dir}", "model.dropout=0.0", "trainer.max_steps=2",
         "trainer.val_check_interval=2", "final_eval.splits=[]", f"hydra.run.dir={run_dir}"],
        cwd=tmp_path,
    )  # fmt: skip
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    hyper_parameters = read_checkpoint(ckpt)["hyper_parameters"]
    imported = import_marian(marian_dir)
    expected_config = imported.model.config.to_dict() | {"dropout": 0.0}
    assert hyper_parameters["model_config"] == expected_config  # swish, output bias, pad 59
    assert hyper_parameters["tokenizer_dir"] == str(marian_dir)
    assert (hyper_parameters["bos_id"], hyper_parameters["pad_id"]) == (59, 59)
    trained = model_state_dict(read_checkpoint(ckpt))
    for key, value in imported.model.state_dict().items():
        change = (trained[key] - value).abs().max()
        assert change < 0.05, key  # two small steps away from the pretrained weights
    assert any((trained[k] != v).any() for k, v in imported.model.state_dict().items())
    loaded = load_checkpoint(ckpt)  # and the fine-tuned checkpoint works with every tool
    assert loaded.tokenizer.convert_ids_to_tokens(59) == "<pad>"
    assert not torch.isnan(next(loaded.model.parameters())).any()
