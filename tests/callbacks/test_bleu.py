"""BleuCallback inside a Lightning Trainer: when it scores, what it logs, what it writes."""

import lightning.pytorch as pl
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader

from tests.helpers.tiny_checkpoint import checkpoint_model
from tests.helpers.tiny_runs import logged_metrics
from transformer_nmt.callbacks import BleuCallback
from transformer_nmt.data import PadCollator
from transformer_nmt.data.encoding import encode_texts
from transformer_nmt.decoding import SearchOptions, translate_token_ids
from transformer_nmt.evaluation import corpus_scores

GREEDY = SearchOptions(beam_size=1, max_len_b=10)


class PairsDataModule(pl.LightningDataModule):
    """The datamodule interface BleuCallback needs, over in-memory sentence pairs."""

    def __init__(self, tokenizer, pairs: dict, max_len: int) -> None:
        super().__init__()
        self.tokenizer, self.pairs, self.max_len = tokenizer, pairs, max_len
        self.pad_id = tokenizer.pad_token_id
        self.bos_id = tokenizer.bos_token_id
        self.eos_id = tokenizer.eos_token_id

    def raw_pairs(self, split: str) -> list[tuple[str, str]]:
        return self.pairs[split]

    def encode_source(self, texts) -> list[list[int]]:
        return [
            ids[: self.max_len - 1] + [self.eos_id] for ids in encode_texts(self.tokenizer, texts)
        ]

    def decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def _loader(self, split: str) -> DataLoader:
        """One batch of the split's first 8 pairs, cut to max_len as the real datamodule does."""
        pairs = self.pairs[split][:8]
        src = encode_texts(self.tokenizer, [s for s, _ in pairs])
        tgt = encode_texts(self.tokenizer, [t for _, t in pairs])
        examples = [
            (i, src_ids[: self.max_len - 1], tgt_ids[: self.max_len - 1])
            for i, (src_ids, tgt_ids) in enumerate(zip(src, tgt, strict=True))
        ]
        collate = PadCollator(self.pad_id, self.bos_id, self.eos_id)
        return DataLoader([collate(examples)], batch_size=None)

    def train_dataloader(self):
        return self._loader("train")

    def val_dataloader(self):
        return self._loader("val")

    def test_dataloader(self):
        return self._loader("test")


class PlainTranslationModule(pl.LightningModule):
    """A model trained with plain cross-entropy: all BleuCallback needs of a LightningModule."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def _loss(self, batch):
        logits = self.model(batch["src_ids"], batch["tgt_in_ids"])
        return F.cross_entropy(
            logits.transpose(1, 2), batch["labels"], ignore_index=self.model.config.pad_id
        )

    def training_step(self, batch, batch_idx):
        return self._loss(batch)

    def validation_step(self, batch, batch_idx):
        self.log("val/loss", self._loss(batch))

    def test_step(self, batch, batch_idx):
        self.log("test/loss", self._loss(batch))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


@pytest.fixture
def datamodule(workspace) -> PairsDataModule:
    return PairsDataModule(workspace.tokenizer, workspace.pairs, max_len=24)


def make_trainer(tmp_path, callbacks, max_epochs=2) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu",
        max_epochs=max_epochs,
        limit_train_batches=1,
        log_every_n_steps=1,
        num_sanity_val_steps=1,
        logger=CSVLogger(tmp_path, name="logs", version=0),
        callbacks=callbacks,
        enable_progress_bar=False,
        enable_model_summary=False,
        deterministic=True,
    )


def expected_scores(module, datamodule, split, n=None):
    pairs = datamodule.raw_pairs(split)[:n]
    outputs = translate_token_ids(
        module.model, datamodule.encode_source([s for s, _ in pairs]),
        datamodule.bos_id, datamodule.eos_id, GREEDY,
    )  # fmt: skip
    return corpus_scores([datamodule.decode(ids) for ids in outputs], [t for _, t in pairs])


def test_val_bleu_is_logged_every_n_epochs_and_selects_checkpoints(tmp_path, workspace, datamodule):
    bleu = BleuCallback(2, max_sentences=5, search=GREEDY, score_test=True, hypotheses_dir=None)
    scored_epochs = []
    original_score = bleu.score

    def counted_score(trainer, pl_module, split, max_sentences=None):
        scored_epochs.append((split, trainer.current_epoch))
        return original_score(trainer, pl_module, split, max_sentences)

    bleu.score = counted_score
    checkpoint = ModelCheckpoint(
        dirpath=tmp_path / "ckpts", monitor="val/bleu", mode="max", every_n_epochs=2
    )
    module = PlainTranslationModule(checkpoint_model(len(workspace.tokenizer), 0).train())
    trainer = make_trainer(tmp_path, [bleu, checkpoint], max_epochs=4)
    trainer.fit(module, datamodule=datamodule)

    assert scored_epochs == [("val", 1), ("val", 3)]  # not the sanity check, not epochs 0, 2
    scores = expected_scores(module, datamodule, "val", n=5)
    assert trainer.callback_metrics["val/bleu"].item() == pytest.approx(scores.bleu, abs=1e-3)
    assert trainer.callback_metrics["val/chrf"].item() == pytest.approx(scores.chrf, abs=1e-3)
    assert checkpoint.best_model_score is not None
    metrics = logged_metrics(tmp_path / "logs/version_0/metrics.csv")
    assert [int(row["epoch"]) for row in metrics if row.get("val/bleu")] == [1, 3]
    hparams = (tmp_path / "logs/version_0/hparams.yaml").read_text()
    assert scores.bleu_signature in hparams


def test_scoring_is_off_at_zero_epochs_and_test_bleu_is_logged(tmp_path, workspace, datamodule):
    module = PlainTranslationModule(checkpoint_model(len(workspace.tokenizer), 0).train())
    bleu = BleuCallback(0, None, GREEDY, score_test=True, hypotheses_dir=str(tmp_path / "hyps"))
    trainer = make_trainer(tmp_path, [bleu], max_epochs=1)
    trainer.fit(module, datamodule=datamodule)
    assert "val/bleu" not in trainer.callback_metrics
    (results,) = trainer.test(module, datamodule=datamodule, verbose=False)
    scores = expected_scores(module, datamodule, "test")
    assert results["test/bleu"] == pytest.approx(scores.bleu, abs=1e-3)
    assert results["test/chrf"] == pytest.approx(scores.chrf, abs=1e-3)
    hypotheses = (tmp_path / "hyps" / "hyps.test.txt").read_text().split("\n")
    assert len(hypotheses) == len(datamodule.raw_pairs("test")) + 1


def test_bad_callback_options_raise_clear_errors():
    with pytest.raises(ValueError, match="every_n_epochs must be >= 0"):
        BleuCallback(-1, None, GREEDY, True, None)
    with pytest.raises(ValueError, match="max_sentences must be positive"):
        BleuCallback(1, 0, GREEDY, True, None)
