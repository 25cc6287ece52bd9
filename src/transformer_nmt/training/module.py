"""The LightningModule: teacher-forced label-smoothed training of the Transformer, nothing more."""

from __future__ import annotations

import logging
import math
from typing import Any

import lightning.pytorch as pl
import torch
from torchmetrics import MeanMetric

from transformer_nmt.checkpoint import embed_tokenizer_files
from transformer_nmt.data import tokenizer_files
from transformer_nmt.model import Transformer, TransformerConfig
from transformer_nmt.private_api import compiled_graphs
from transformer_nmt.training.fused_loss import fused_loss
from transformer_nmt.training.loss import TokenLosses, label_smoothed_loss
from transformer_nmt.training.optimizer import AdamConfig, build_adam
from transformer_nmt.training.schedules import StepSchedule, build_scheduler
from transformer_nmt.training.update import (
    NonFiniteSteps,
    StepTotals,
    TokenMeanUpdate,
    apply_update_scale,
)

log = logging.getLogger(__name__)


class TranslationModule(pl.LightningModule):
    """Wires :class:`Transformer` to the Lightning loop.

    Batches are the data module's dicts (``src_ids``, ``tgt_in_ids``, ``labels``). The init
    arguments are saved as hyper-parameters, so a checkpoint alone rebuilds the model
    (``model_config``) and names its tokenizer (``tokenizer_dir``, ``tokenizer_identity``) and
    special ids: a plain ``torch.load`` reader finds them in ``ckpt["hyper_parameters"]`` and the
    model's weights under ``model.`` in ``ckpt["state_dict"]``. ``compile=True`` compiles a
    function (model and loss), not the module, so the weights keep their names.

    Each optimizer step descends the label-smoothed loss per target token of the whole step: all
    accumulated micro-batches and all ranks, each token weighing the same (``update.py``), and
    an update whose loss or gradient is NaN or infinite is never applied: the run stops with
    :class:`~transformer_nmt.training.loss.NonFiniteLossError` (``update.NonFiniteSteps``).
    ``fused_loss`` computes the pre-softmax linear and the loss together, a chunk of tokens at a
    time, without [tokens, vocabulary] tensors (``fused_loss.py``; the same values and
    gradients). It has no bias term, so a model whose pre-softmax linear has one
    (``output_bias``, e.g. a model imported from Marian) takes the plain path whatever
    ``fused_loss`` says.
    """

    def __init__(
        self,
        model_config: dict,
        tokenizer_dir: str,
        src_lang: str,
        tgt_lang: str,
        bos_id: int,
        eos_id: int,
        pad_id: int,
        label_smoothing: float = 0.1,
        fused_loss: bool | None = None,
        optimizer: dict | None = None,
        scheduler: dict | None = None,
        compile: bool | None = None,
        run_config: dict | None = None,
        tokenizer_identity: str | None = None,
    ) -> None:
        super().__init__()
        if model_config.get("pad_id") != pad_id:
            raise ValueError(
                f"model_config pad_id {model_config.get('pad_id')} != pad_id {pad_id}; take "
                f"both from the same tokenizer (train() fills them from the data module)"
            )
        self.save_hyperparameters(logger=False)
        self.model = Transformer(TransformerConfig(**model_config))
        # Noam's d_model is the model's, whatever the scheduler config says
        self.schedule = StepSchedule(**{**(scheduler or {}), "d_model": self.model.config.d_model})
        self._use_compiler(bool(compile))  # compile=None: decided in setup(), on the device
        self._update = TokenMeanUpdate()
        self._step_totals: StepTotals | None = None
        self._non_finite = NonFiniteSteps()
        self._tokens_trained: torch.Tensor | int = 0  # on the device once training started
        self.eval_loss = MeanMetric()  # validation or test, whichever runs
        self.eval_nll = MeanMetric()
        self.last_validated_step: int | None = None  # global step of the last real validation
        self._tokenizer_files: dict[str, bytes] | None = None

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Embed the tokenizer's files, so the checkpoint works where its cache does not exist."""
        if self._tokenizer_files is None:
            self._tokenizer_files = tokenizer_files(self.hparams.tokenizer_dir) or {}
        embed_tokenizer_files(checkpoint, self._tokenizer_files)

    def _use_compiler(self, compile: bool) -> None:
        """Compile a *function* of model and loss, not a registered module: parameter names stay
        ``model.*``. Dynamic batch and length dimensions: a few graphs, none recompiled for a new
        batch shape. ``fused_loss=None`` takes the faster loss: compiled with the model (the
        compiler fuses it) or, eager, the fused one; ``fused_loss``'s chunk loop stays eager."""
        fused_loss = self.hparams.fused_loss
        fused_loss = not compile if fused_loss is None else fused_loss
        self._fused_loss = fused_loss and self.model.output_projection.bias is None
        self._compiled = compile
        self._step_losses = (
            torch.compile(self._compute_losses, dynamic=True) if compile else self._compute_losses
        )

    def setup(self, stage: str) -> None:
        if self.hparams.compile is None:  # compile where it is faster: on a GPU
            self._use_compiler(self.trainer.strategy.root_device.type == "cuda")

    @property
    def tokens_trained(self) -> int:
        """Target tokens of every optimizer step so far, all ranks (a host read)."""
        return int(self._tokens_trained)

    def batch_losses(self, batch: dict) -> TokenLosses:
        """The batch's loss sums; with ``compile=True``, through the compiled function."""
        return self._step_losses(batch["src_ids"], batch["tgt_in_ids"], batch["labels"])

    def _compute_losses(self, src_ids, tgt_in_ids, labels) -> TokenLosses:
        pad_id, epsilon = self.hparams.pad_id, self.hparams.label_smoothing
        if self._fused_loss:
            hidden = self.model.forward_hidden(src_ids, tgt_in_ids)  # [B, T, d_model]
            weight = self.model.output_projection.weight  # the Parameter: tied gradients add up
            return fused_loss(hidden, weight, labels, pad_id, epsilon)
        logits = self.model(src_ids, tgt_in_ids)  # [B, T, V]
        return label_smoothed_loss(logits, labels, pad_id, epsilon)

    def on_train_start(self) -> None:
        self._update.reset()

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        losses = self.batch_losses(batch)
        self._update.add(losses)
        # The SUM: on_before_optimizer_step turns the step's gradient into its token mean's.
        return losses.loss_sum

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """The step's token-weighted loss and gradient norm (one all-reduce), its non-finite
        guard, decided on the device; the host reads them only on logging steps."""
        trainer = self.trainer
        totals = self._update.finish(
            self._gradients(),
            reduce_sum=lambda sums: trainer.strategy.reduce(sums, reduce_op="sum"),
            backward_divisor=trainer.accumulate_grad_batches * trainer.world_size,
        )
        step = self.global_step + 1  # the step about to be taken
        # fp16 with a GradScaler: an overflowing gradient is routine, the scaler skips that step
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        found_inf = self._non_finite.note(step, totals, check_gradient=scaler is None)
        if scaler is None and _skips_on_found_inf(optimizer):
            optimizer.found_inf = found_inf  # read by the optimizer's step, as GradScaler's
        else:
            self._non_finite.check()  # this optimizer cannot skip a step: decide now
        self._step_totals = totals
        self._tokens_trained = self._tokens_trained + totals.tokens.double()
        if trainer.log_every_n_steps > 0 and step % trainer.log_every_n_steps == 0:
            self._non_finite.check()
            means = totals.means()
            self.log("train/loss", means.loss, prog_bar=True, batch_size=1)
            self.log("train/nll", means.nll, batch_size=1)
            self.log("train/grad_norm", means.grad_norm, batch_size=1)
            self.log("lr", optimizer.param_groups[0]["lr"], prog_bar=True, batch_size=1)

    def on_train_epoch_end(self) -> None:
        if self._compiled:  # a few graphs in the first epoch, none after (dynamic shapes)
            graphs = compiled_graphs()
            log.info("torch.compile: %d graphs compiled after epoch %d", graphs, self.current_epoch)
            self.log("compile/graphs", float(graphs), batch_size=1)

    def on_train_end(self) -> None:
        self._non_finite.check()

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Scale the gradients to the step's token mean and clip them, in one pass, by the norm
        on_before_optimizer_step computed (Lightning calls this right after that hook)."""
        apply_update_scale(
            self._gradients(), self._step_totals, gradient_clip_val, gradient_clip_algorithm
        )
        self._step_totals = None

    def _gradients(self) -> list[torch.Tensor]:
        return [p.grad for p in self.parameters() if p.grad is not None]

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._update_eval_metrics(batch)

    def on_validation_epoch_end(self) -> None:
        self._log_eval_metrics("val")
        if not self.trainer.sanity_checking:
            self.last_validated_step = self.global_step

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self._update_eval_metrics(batch)

    def on_test_epoch_end(self) -> None:
        self._log_eval_metrics("test")

    def _update_eval_metrics(self, batch: dict) -> None:
        losses = self.batch_losses(batch)
        loss, nll = losses.means()
        self.eval_loss.update(loss, weight=losses.n_tokens)
        self.eval_nll.update(nll, weight=losses.n_tokens)

    def _log_eval_metrics(self, split: str) -> None:
        # token-weighted means over the whole split, all ranks included (torchmetrics syncs)
        loss, nll = self.eval_loss.compute(), self.eval_nll.compute()
        self.eval_loss.reset()
        self.eval_nll.reset()
        # already equal on every rank; sync_dist only silences Lightning's DDP warning
        self.log(f"{split}/loss", loss, prog_bar=split == "val", sync_dist=True)
        self.log(f"{split}/nll", nll, sync_dist=True)
        self.log(f"{split}/ppl", math.exp(min(nll.item(), 700.0)), sync_dist=True)

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer = build_adam(
            self.model.parameters(), AdamConfig(**(self.hparams.optimizer or {}))
        )
        scheduler = build_scheduler(optimizer, self.schedule)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1},
        }


def _skips_on_found_inf(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer.step`` skips the update where ``optimizer.found_inf`` is 1 (torch's
    fused optimizers; their ``_step_supports_amp_scaling`` is how GradScaler tells)."""
    optimizer = getattr(optimizer, "optimizer", optimizer)  # Lightning's wrapper
    return getattr(optimizer, "_step_supports_amp_scaling", False)
