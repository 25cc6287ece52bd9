"""AttentionMaps: on by default, checked before the data, silent off rank 0, images into
TensorBoard, and in a real sweep each job's PNGs, maps and W&B images of every validation."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from tests.helpers.hydra_config import compose_config
from tests.helpers.wandb_records import wandb_records
from transformer_nmt.callbacks import AttentionMaps
from transformer_nmt.callbacks.attention_maps import log_image
from transformer_nmt.cli.errors import UsageError
from transformer_nmt.cli.train_config import build_callbacks
from transformer_nmt.evaluation.attention import load_attention_maps


def test_on_by_default_off_with_null_and_a_bad_kind_is_one_error_line(tmp_path):
    cfg = compose_config(f"output_dir={tmp_path}")
    (maps,) = [c for c in build_callbacks(cfg.callbacks) if isinstance(c, AttentionMaps)]
    assert maps.dirpath == tmp_path / "attention"
    assert (maps.num_sentences, maps.kinds) == (2, ["cross"])
    off = compose_config(f"output_dir={tmp_path}", "callbacks.attention_maps=null")
    assert not [c for c in build_callbacks(off.callbacks) if isinstance(c, AttentionMaps)]
    bad = compose_config(f"output_dir={tmp_path}", "callbacks.attention_maps.kinds=[self]")
    with pytest.raises(UsageError) as raised:
        build_callbacks(bad.callbacks)
    assert str(raised.value) == (
        "callbacks.attention_maps: callbacks.attention_maps.kinds must be a non-empty list of "
        "['encoder_self', 'decoder_self', 'cross'], got ['self']"
    )
    with pytest.raises(ValueError, match="num_sentences must be >= 1, got 0; turn the maps off"):
        AttentionMaps(str(tmp_path), num_sentences=0)


def test_ranks_other_than_zero_the_sanity_check_and_earlier_batches_draw_nothing(tmp_path):
    callback = AttentionMaps(str(tmp_path / "attention"))
    for trainer in (
        SimpleNamespace(is_global_zero=False, sanity_checking=False, num_val_batches=[3]),
        SimpleNamespace(is_global_zero=True, sanity_checking=True, num_val_batches=[3]),
    ):
        callback.on_validation_batch_end(trainer, None, None, None, batch_idx=2)  # the last
    for batch_idx in (0, 1):  # rank 0, but not the last batch yet
        trainer = SimpleNamespace(is_global_zero=True, sanity_checking=False, num_val_batches=[3])
        callback.on_validation_batch_end(trainer, None, None, None, batch_idx=batch_idx)
    assert callback.sentences is None and not callback._pending
    assert not (tmp_path / "attention").exists()


def test_tensorboard_receives_each_png_as_an_image_at_its_step(tmp_path):
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tensorboard = TensorBoardLogger(str(tmp_path), name="tb")
    trainer = SimpleNamespace(loggers=[tensorboard])
    png, size = _png(tmp_path / "map.png"), (3, 5)
    log_image(trainer, "attention/sentence_0/cross_mean", 4, tmp_path / "map.png", png, size)
    log_image(trainer, "attention/sentence_0/cross_mean", 8, tmp_path / "map.png", png, size)
    tensorboard.finalize("success")
    (events,) = tmp_path.glob("tb/**/events.out.tfevents.*")
    accumulator = EventAccumulator(str(events), size_guidance={"images": 0})
    accumulator.Reload()
    images = accumulator.Images("attention/sentence_0/cross_mean")
    assert [(image.step, image.height, image.width) for image in images] == [(4, 3, 5), (8, 3, 5)]
    assert images[1].encoded_image_string == png


def _png(path):
    from PIL import Image

    Image.fromarray(np.zeros((3, 5, 3), dtype=np.uint8)).save(path)
    return path.read_bytes()


@pytest.mark.slow  # reads the sweep's runs
def test_each_job_of_a_sweep_draws_every_validation_into_its_own_run(tiny_sweep):
    keys = [f"attention/sentence_{i}/cross_{view}" for i in (0, 1) for view in ("mean", "heads")]
    for job in ("0", "1"):
        attention = tiny_sweep / job / "attention"
        for step in ("step_000004", "step_000008"):
            pngs = sorted(p.name for p in (attention / step).iterdir())
            assert pngs == sorted(f"{key.split('/')[1]}_{key.split('/')[2]}.png" for key in keys)
            assert all(p.read_bytes().startswith(b"\x89PNG") for p in (attention / step).iterdir())
        step, (short, long) = load_attention_maps(attention / "maps.npz")
        assert step == 8 and len(short.src_tokens) < len(long.src_tokens)  # one short, one long
        assert long.src_tokens[-1] == "</s>" and long.tgt_tokens[0] == "<s>"
        cross = long.maps["cross"]  # one layer of two heads: [1, 2, T, S]
        assert cross.shape == (1, 2, len(long.tgt_tokens), len(long.src_tokens))
        assert np.allclose(cross.sum(-1), 1, atol=1e-5) and set(long.maps) == {"cross"}
        assert sorted(_wandb_images(tiny_sweep / job)) == sorted(
            (key, step) for key in keys for step in (4, 8)
        )
        (run,) = (tiny_sweep / job).glob("wandb/offline-run-*")
        assert len(list(run.glob("files/media/images/attention/sentence_*/*.png"))) == 8


def _wandb_images(job_dir) -> list[tuple[str, int]]:
    """(key, trainer/global_step) of every image list in the job's offline W&B history."""
    (log,) = job_dir.glob("wandb/offline-run-*/run-*.wandb")
    logged = []
    for record in wandb_records(log):
        if record.WhichOneof("record_type") != "history":
            continue
        flat, nested = {}, {}  # a list of images is logged as fields under its key
        for item in record.history.item:
            value, path = json.loads(item.value_json), list(item.nested_key) or [item.key]
            if len(path) == 2:
                nested.setdefault(path[0], {})[path[1]] = value
            else:
                flat[path[0]] = value
        for key, fields in nested.items():
            if fields.get("_type") == "images/separated" and len(fields["filenames"]) == 1:
                logged.append((key, flat["trainer/global_step"]))
    return logged
