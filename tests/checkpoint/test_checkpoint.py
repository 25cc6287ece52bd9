"""Reading, loading and averaging checkpoints, and the errors for files that are not ours."""

import shutil
from pathlib import Path

import pytest
import torch

from tests.helpers.tiny_checkpoint import (
    checkpoint_dict,
    checkpoint_model,
    write_checkpoint,
)
from transformer_nmt.checkpoint import (
    CheckpointError,
    average_checkpoints,
    average_weights,
    last_checkpoints,
    load_checkpoint,
    read_checkpoint,
)
from transformer_nmt.data import tokenizer_files


def test_load_checkpoint_restores_model_tokenizer_and_metadata(workspace):
    loaded = load_checkpoint(workspace.ckpt_path)
    src = torch.tensor([[5, 6, 7, 2], [8, 2, 0, 0]])
    tgt = torch.tensor([[1, 9, 10], [1, 11, 0]])
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(src, tgt), workspace.model(src, tgt))
    assert not loaded.model.training
    assert len(loaded.tokenizer) == loaded.model.config.tgt_vocab_size
    assert (loaded.src_lang, loaded.tgt_lang) == ("en", "de")
    assert (loaded.pad_id, loaded.bos_id, loaded.eos_id) == (0, 1, 2)


def test_missing_checkpoint_names_the_path(tmp_path):
    missing = tmp_path / "nowhere.ckpt"
    with pytest.raises(CheckpointError, match=f"checkpoint {missing} does not exist"):
        load_checkpoint(missing)


def test_a_file_that_is_not_a_torch_checkpoint_is_refused(tmp_path):
    text = tmp_path / "notes.ckpt"
    text.write_text("not a checkpoint\n")
    with pytest.raises(CheckpointError, match=f"{text} is not a PyTorch checkpoint"):
        read_checkpoint(text)


def test_a_plain_state_dict_is_refused(tmp_path, workspace):
    path = tmp_path / "weights.pt"
    torch.save(workspace.model.state_dict(), path)
    with pytest.raises(CheckpointError, match="not a transformer-nmt checkpoint.*plain state_dict"):
        read_checkpoint(path)


def test_another_projects_lightning_checkpoint_is_refused_naming_what_is_missing(tmp_path):
    path = tmp_path / "other.ckpt"
    other = {"state_dict": {"net.weight": torch.zeros(2)}, "hyper_parameters": {"lr": 0.1}}
    torch.save(other, path)
    with pytest.raises(CheckpointError, match=r"lack \['model_config', 'tokenizer_dir'"):
        read_checkpoint(path)


def test_a_tokenizer_that_does_not_match_the_model_is_refused(tmp_path, workspace):
    bigger = checkpoint_model(len(workspace.tokenizer) + 8, pad_id=0)
    path = write_checkpoint(tmp_path / "bigger.ckpt", bigger, workspace.tokenizer_dir)
    with pytest.raises(CheckpointError, match="has 120 tokens but the model's target vocab"):
        load_checkpoint(path)
    other_pad = write_checkpoint(
        tmp_path / "pad.ckpt", workspace.model, workspace.tokenizer_dir, pad_id=3
    )
    with pytest.raises(
        CheckpointError, match=r"pad/bos/eos ids are \(0, 1, 2\) but .* \(3, 1, 2\)"
    ):
        load_checkpoint(other_pad)


def test_a_moved_tokenizer_can_be_pointed_to(tmp_path, workspace):
    path = write_checkpoint(
        tmp_path / "moved.ckpt", workspace.model, workspace.tokenizer_dir,
        tokenizer_dir=str(tmp_path / "gone"),
    )  # fmt: skip
    with pytest.raises(CheckpointError, match="pass tokenizer_dir="):
        load_checkpoint(path)
    loaded = load_checkpoint(path, tokenizer_dir=str(workspace.tokenizer_dir))
    assert len(loaded.tokenizer) == len(workspace.tokenizer)


def test_weights_of_a_compiled_model_load(tmp_path, workspace):
    checkpoint = checkpoint_dict(workspace.model, workspace.tokenizer_dir)
    checkpoint["state_dict"] = {
        key.replace("model.", "model._orig_mod.", 1): value
        for key, value in checkpoint["state_dict"].items()
    }
    torch.save(checkpoint, tmp_path / "compiled.ckpt")
    loaded = load_checkpoint(tmp_path / "compiled.ckpt")
    for key, value in workspace.model.state_dict().items():
        torch.testing.assert_close(loaded.model.state_dict()[key], value)


def test_average_checkpoints_means_the_weights_and_drops_training_state(tmp_path, workspace):
    models = [checkpoint_model(len(workspace.tokenizer), 0, seed=seed) for seed in range(3)]
    paths = [
        write_checkpoint(tmp_path / f"epoch={i}.ckpt", model, workspace.tokenizer_dir)
        for i, model in enumerate(models)
    ]
    out = average_checkpoints(paths, tmp_path / "averaged.ckpt")
    averaged = torch.load(out, map_location="cpu", weights_only=False)
    for key in models[0].state_dict():
        expected = sum(model.state_dict()[key] for model in models) / 3
        torch.testing.assert_close(averaged["state_dict"][f"model.{key}"], expected)
    assert "optimizer_states" not in averaged and "lr_schedulers" not in averaged
    assert averaged["hyper_parameters"] == read_checkpoint(paths[0])["hyper_parameters"]
    assert averaged["averaged_from"] == [str(p) for p in paths]
    state = averaged["state_dict"]  # tied weights stay one tensor
    shared = state["model.output_projection.weight"].untyped_storage().data_ptr()
    assert state["model.encoder.embedding.embedding.weight"].untyped_storage().data_ptr() == shared
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [p.name for p in paths] + ["averaged.ckpt"]
    )  # no temporary files left behind
    assert load_checkpoint(out).model.config == models[0].config


def test_average_weights_means_float_tensors_keeps_the_rest_and_ties_stay_tied():
    tied = torch.tensor([1.0, 2.0])
    first = {"a": tied, "b": tied, "steps": torch.tensor([7]), "half": torch.ones(2).half()}
    second = {"a": torch.tensor([3.0, 6.0]), "steps": torch.tensor([9]), "half": torch.zeros(2)}
    second["b"] = second["a"]
    averaged = average_weights([("one", first), ("two", second)], ["a", "b", "steps", "half"])
    assert torch.equal(averaged["a"], torch.tensor([2.0, 4.0]))
    assert averaged["b"] is averaged["a"]
    assert torch.equal(averaged["steps"], torch.tensor([7]))  # not floating point: the first's
    assert averaged["half"].dtype == torch.float16
    assert torch.equal(averaged["half"], torch.full((2,), 0.5, dtype=torch.float16))
    with pytest.raises(CheckpointError, match=r"cannot average two with one: weight 'a' has shape"):
        average_weights([("one", first), ("two", {**second, "a": torch.zeros(3)})], ["a"])


def test_a_model_config_with_an_unknown_field_is_refused(tmp_path, workspace):
    checkpoint = checkpoint_dict(workspace.model, workspace.tokenizer_dir)
    checkpoint["hyper_parameters"]["model_config"]["d_head"] = 16
    torch.save(checkpoint, tmp_path / "model.ckpt")
    with pytest.raises(CheckpointError, match="unusable model_config.*d_head"):
        load_checkpoint(tmp_path / "model.ckpt")


def test_averaging_checkpoints_of_different_models_is_refused(tmp_path, workspace):
    first = write_checkpoint(tmp_path / "a.ckpt", workspace.model, workspace.tokenizer_dir)
    wider = checkpoint_dict(workspace.model, workspace.tokenizer_dir)
    wider["hyper_parameters"]["model_config"] = {
        **wider["hyper_parameters"]["model_config"], "d_ff": 128,
    }  # fmt: skip
    torch.save(wider, tmp_path / "b.ckpt")
    with pytest.raises(CheckpointError, match=r"model_config differ in \['d_ff'\]"):
        average_checkpoints([first, tmp_path / "b.ckpt"], tmp_path / "avg.ckpt")
    assert not (tmp_path / "avg.ckpt").exists()


def test_a_checkpoint_given_twice_is_refused_by_either_name(tmp_path, workspace):
    first = write_checkpoint(tmp_path / "a.ckpt", workspace.model, workspace.tokenizer_dir)
    (tmp_path / "link.ckpt").symlink_to(first)
    with pytest.raises(CheckpointError, match=f"^{first}: the same checkpoint is given twice"):
        average_checkpoints([first, first], tmp_path / "avg.ckpt")
    with pytest.raises(CheckpointError, match="and .*link.ckpt: the same checkpoint is given"):
        average_checkpoints([first, tmp_path / "link.ckpt"], tmp_path / "avg.ckpt")
    assert not (tmp_path / "avg.ckpt").exists()


def test_last_checkpoints_orders_by_step_and_skips_last(tmp_path):
    for name in ["epoch=0-step=900.ckpt", "epoch=1-step=1800.ckpt", "epoch=2-step=2700.ckpt",
                 "epoch=10-step=9900.ckpt", "last.ckpt", "notes.txt"]:  # fmt: skip
        (tmp_path / name).write_bytes(b"")
    names = [p.name for p in last_checkpoints(tmp_path, 3)]
    assert names == ["epoch=1-step=1800.ckpt", "epoch=2-step=2700.ckpt", "epoch=10-step=9900.ckpt"]
    with pytest.raises(CheckpointError, match="asked for the last 5 checkpoints but .* holds 4"):
        last_checkpoints(tmp_path, 5)


def test_a_checkpoint_carries_its_tokenizer_to_where_the_cache_is_gone(
    tmp_path, workspace, monkeypatch
):
    monkeypatch.setenv("TRANSFORMER_NMT_CACHE", str(tmp_path / "cache"))
    checkpoint = checkpoint_dict(
        workspace.model, workspace.tokenizer_dir, tokenizer_dir=str(tmp_path / "gone")
    )
    checkpoint["tokenizer_files"] = tokenizer_files(str(workspace.tokenizer_dir))
    torch.save(checkpoint, tmp_path / "portable.ckpt")

    loaded = load_checkpoint(tmp_path / "portable.ckpt")
    assert loaded.tokenizer.get_vocab() == workspace.tokenizer.get_vocab()
    assert Path(loaded.tokenizer_dir).parent == tmp_path / "cache" / "tokenizers"
    copy = shutil.copy(tmp_path / "portable.ckpt", tmp_path / "copy.ckpt")
    averaged = average_checkpoints([tmp_path / "portable.ckpt", copy], tmp_path / "avg.ckpt")
    assert load_checkpoint(averaged).tokenizer.get_vocab() == workspace.tokenizer.get_vocab()


@pytest.mark.parametrize("stored_identity", [True, False])
def test_another_tokenizer_of_the_same_size_is_refused_naming_both(
    tmp_path, workspace, other_tokenizer_dir, stored_identity, monkeypatch
):
    monkeypatch.setenv("TRANSFORMER_NMT_CACHE", str(tmp_path / "cache"))
    checkpoint = checkpoint_dict(workspace.model, workspace.tokenizer_dir, as_trained=True)
    if not stored_identity:  # a module built without one: computed from the embedded files
        del checkpoint["hyper_parameters"]["tokenizer_identity"]
    torch.save(checkpoint, tmp_path / "model.ckpt")
    with pytest.raises(CheckpointError) as refused:
        load_checkpoint(tmp_path / "model.ckpt", tokenizer_dir=str(other_tokenizer_dir))
    message = str(refused.value)
    assert message.startswith(f"tokenizer '{other_tokenizer_dir}' is not the one checkpoint")
    assert "same size (120 tokens) but another vocabulary" in message
    assert f"the checkpoint's own is '{workspace.tokenizer_dir}'" in message


def test_a_tokenizer_directory_replaced_since_training_is_not_used(
    tmp_path, workspace, other_tokenizer_dir, monkeypatch, caplog
):
    monkeypatch.setenv("TRANSFORMER_NMT_CACHE", str(tmp_path / "cache"))
    named = shutil.copytree(workspace.tokenizer_dir, tmp_path / "tokenizer")
    portable = write_checkpoint(tmp_path / "portable.ckpt", workspace.model, named, as_trained=True)
    identity_only = checkpoint_dict(workspace.model, named, as_trained=True)
    del identity_only["tokenizer_files"]
    torch.save(identity_only, tmp_path / "identity_only.ckpt")
    shutil.copytree(other_tokenizer_dir, named, dirs_exist_ok=True)  # same names, other BPE

    loaded = load_checkpoint(portable)  # the embedded copy is the tokenizer it was trained with
    assert loaded.tokenizer.get_vocab() == workspace.tokenizer.get_vocab()
    assert "using the copy embedded in the checkpoint" in caplog.text
    with pytest.raises(CheckpointError, match="its files changed since training"):
        load_checkpoint(tmp_path / "identity_only.ckpt")
