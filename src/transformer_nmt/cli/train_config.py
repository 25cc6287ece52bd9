"""``train.py``'s config, checked before any data work.

Every config object is built (and so validated) before the corpus is read or the BPE trained,
which can take minutes: the model with placeholder vocabulary sizes, the data, search, final
evaluation, optimizer and scheduler options, the trainer's arguments, the callbacks and loggers.
The directories the run writes into must be writable, and a checkpoint to resume from must fit
the configured model. Each problem is a :class:`UsageError` or ``CheckpointError`` naming the
option and the fix.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate, to_absolute_path
from lightning.pytorch.callbacks import Callback, ModelCheckpoint, ModelSummary, ProgressBar
from omegaconf import DictConfig, OmegaConf

from transformer_nmt.atomic import check_writable_directory
from transformer_nmt.callbacks import LastCheckpoint
from transformer_nmt.checkpoint import (
    TOKENIZER_FILES_KEY,
    CheckpointError,
    LoadedCheckpoint,
    checkpoint_tokenizer_dir,
    model_config,
    read_checkpoint,
    tokenizer_mismatch,
)
from transformer_nmt.data import DataConfig
from transformer_nmt.decoding import SearchOptions
from transformer_nmt.evaluation.final_eval import FinalEvalConfig
from transformer_nmt.export import import_marian
from transformer_nmt.launch.requeue import under_submitit
from transformer_nmt.model import TransformerConfig
from transformer_nmt.tracking.loggers import build_loggers
from transformer_nmt.tracking.objective import final_eval_for
from transformer_nmt.training.optimizer import AdamConfig
from transformer_nmt.training.schedules import StepSchedule

from .config_schemas import SCHEMAS
from .errors import UsageError

log = logging.getLogger(__name__)

# The vocabulary size and pad id the model is checked with before the tokenizer exists.
_PLACEHOLDER_VOCAB_SIZE, _PLACEHOLDER_PAD_ID = 1000, 0
_FROM_TOKENIZER = ("src_vocab_size", "tgt_vocab_size", "pad_id")
# Model options that change no weight: a resumed run may change them, and a model started from a
# pretrained one (``init_from``) takes them from the ``model`` config (its shape is the
# pretrained model's).
_TRAINING_OPTIONS = ("dropout", "attention_dropout", "attention")
# Lightning's own ckpt_path values, resolved by the Trainer (nothing to read beforehand).
_LIGHTNING_CKPT_NAMES = ("last", "best", "hpc", "registry")


@dataclass
class TrainConfig:
    """The checked pieces of a ``train.py`` config."""

    data: DataConfig
    model: dict  # every TransformerConfig field; vocabulary sizes and pad id are placeholders
    search: SearchOptions
    final_eval: FinalEvalConfig
    trainer: dict  # lightning.pytorch.Trainer keyword arguments
    callbacks: list[Callback]


def check_config(cfg: DictConfig) -> TrainConfig:
    """Build every config object of a ``train.py`` config, before any data work."""
    _check_known_keys(cfg)
    data = _checked("data", lambda: OmegaConf.to_object(cfg.data))
    model = resolve_model_config(
        cfg.model, *_placeholders(cfg.model), data_max_len=data.max_len
    )  # fmt: skip
    search = _checked("search", lambda: OmegaConf.to_object(cfg.search))
    final_eval = _checked("final_eval", lambda: OmegaConf.to_object(cfg.final_eval))
    # widened to produce what a sweep optimises: its split, and decoding for BLEU or chrF
    final_eval = _checked(
        "optimized_metric", lambda: final_eval_for(cfg.get("optimized_metric"), final_eval)
    )
    resume_mode(cfg.get("resume"))
    _checked("optimizer", lambda: AdamConfig(**OmegaConf.to_container(cfg.optimizer)))
    scheduler = OmegaConf.to_container(cfg.scheduler, resolve=True)
    _checked("scheduler", lambda: StepSchedule(**{**scheduler, "d_model": model["d_model"]}))
    if not 0.0 <= cfg.label_smoothing < 1.0:
        raise UsageError(f"label_smoothing must be in [0, 1), got {cfg.label_smoothing}")
    trainer = trainer_options(cfg.trainer)
    check_accelerator(trainer)
    callbacks = build_callbacks(
        cfg.get("callbacks"),
        trainer.get("enable_progress_bar", True),
        trainer.get("enable_model_summary", True),
    )
    return TrainConfig(data, model, search, final_eval, trainer, callbacks)


def _check_known_keys(cfg: DictConfig) -> None:
    """Refuse a key a schema does not have: ``+data.max_token=…`` would otherwise be ignored
    (Hydra's ``+`` adds keys even to a typed node, and ``to_object`` drops them)."""
    for name, schema in SCHEMAS.items():
        known = {f.name for f in fields(schema)}
        unknown = sorted(set(cfg.get(name) or {}) - known)
        if unknown:
            raise UsageError(f"unknown {name} option(s) {unknown}; valid keys are {sorted(known)}")


def _checked(name: str, build):
    try:
        return build()
    except (TypeError, ValueError) as error:
        raise UsageError(f"{name}: {error}") from error


def _placeholders(model_cfg: DictConfig) -> tuple[int, int]:
    """Vocabulary size and pad id to check the model with: the config's own, if it sets them."""
    vocab_size = model_cfg.get("src_vocab_size", "???")
    pad_id = model_cfg.get("pad_id", "???")
    return (
        vocab_size if isinstance(vocab_size, int) else _PLACEHOLDER_VOCAB_SIZE,
        pad_id if isinstance(pad_id, int) else _PLACEHOLDER_PAD_ID,
    )


def pretrained_model(init_from: str | None, data: DataConfig) -> LoadedCheckpoint | None:
    """The Marian (or Pegasus) model ``init_from`` names (a Hub id or a folder), imported, or
    None without ``init_from``."""
    if not init_from:
        return None
    local = Path(to_absolute_path(init_from))
    return import_marian(
        local if local.exists() else init_from, src_lang=data.src_lang, tgt_lang=data.tgt_lang
    )


def data_config(data: DataConfig, pretrained: LoadedCheckpoint | None) -> DataConfig:
    """The data config; a pretrained model brings its tokenizer."""
    if pretrained is None:
        return data
    if data.tokenizer == "pretrained" and data.tokenizer_name != pretrained.tokenizer_dir:
        raise UsageError(
            f"init_from={pretrained.tokenizer_dir} brings its own tokenizer, but the data config "
            f"names data.tokenizer_name={data.tokenizer_name}; leave data.tokenizer unset"
        )
    return replace(data, tokenizer="pretrained", tokenizer_name=pretrained.tokenizer_dir)


def pretrained_model_config(pretrained: LoadedCheckpoint, model_cfg: Any) -> dict:
    """The pretrained model's config, with the ``model`` config's training options (dropout,
    attention implementation)."""
    options = pretrained.model.config.to_dict()
    for name in _TRAINING_OPTIONS:
        options[name] = model_cfg[name]
    return options


def resolve_model_config(model_cfg: Any, vocab_size: int, pad_id: int, data_max_len: int) -> dict:
    """All ``TransformerConfig`` fields as a plain dict, vocabulary sizes and pad id from the data.

    The ``model`` config leaves ``src_vocab_size``, ``tgt_vocab_size`` and ``pad_id`` unset
    (``???``): they are the tokenizer's. A value set there must agree with it.
    """
    options = (
        OmegaConf.to_container(model_cfg, resolve=True, throw_on_missing=False)
        if OmegaConf.is_config(model_cfg)
        else dict(model_cfg)
    )
    for key, value in (
        ("src_vocab_size", vocab_size),
        ("tgt_vocab_size", vocab_size),
        ("pad_id", pad_id),
    ):
        if options.get(key) in (None, "???"):
            options[key] = value
        elif options[key] != value:
            raise UsageError(
                f"model.{key}={options[key]} but the data's tokenizer has {value}; leave "
                f"model.{key} unset to take it from the data"
            )
    known = {f.name for f in fields(TransformerConfig)}
    unknown = sorted(set(options) - known)
    if unknown:  # a key added with +model.<key>=... that the schema does not have
        raise UsageError(f"unknown model option(s) {unknown}; valid keys are {sorted(known)}")
    config = _checked("model", lambda: TransformerConfig(**options))
    if config.max_len < data_max_len:
        raise UsageError(
            f"model.max_len={config.max_len} is shorter than data.max_len={data_max_len}: the "
            f"decoder needs a position for every target token; raise model.max_len or lower "
            f"data.max_len"
        )
    return asdict(config)


def trainer_options(trainer_cfg: Any) -> dict:
    """``Trainer`` keyword arguments from the ``trainer`` group, checked; its intervals all
    count optimizer steps.

    ``max_steps`` and ``log_every_n_steps`` are optimizer steps to Lightning too (so is
    ``callbacks.last_checkpoint.every_n_train_steps``); an integer ``val_check_interval`` is
    training batches to Lightning, so it is multiplied here by ``accumulate_grad_batches``, the
    batches of one optimizer step. (A float stays a fraction of an epoch.)
    """
    import lightning.pytorch as pl

    options = OmegaConf.to_container(trainer_cfg, resolve=True)
    if "use_distributed_sampler" in options:
        raise UsageError(
            "remove trainer.use_distributed_sampler: it is always False, because the data "
            "module shards its token-bucketed batches across ranks itself"
        )
    known = set(inspect.signature(pl.Trainer.__init__).parameters) - {"self"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise UsageError(
            f"unknown trainer option(s) {unknown}: the trainer group holds "
            f"lightning.pytorch.Trainer arguments"
        )
    accumulate = options.get("accumulate_grad_batches", 1)
    interval = options.get("val_check_interval")
    if isinstance(interval, int) and not isinstance(interval, bool):
        options["val_check_interval"] = interval * accumulate
    return options


def check_accelerator(options: dict) -> None:
    """Refuse ``trainer.accelerator=gpu`` where PyTorch sees no GPU, saying what to use."""
    import torch

    accelerator = str(options.get("accelerator", "auto"))
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise UsageError(
            f"trainer.accelerator={accelerator} but PyTorch sees no GPU here; use trainer=cpu, "
            f"or trainer.accelerator=auto to take a GPU only when there is one"
        )


def build_callbacks(
    callbacks_cfg: Any, enable_progress_bar: bool = True, enable_model_summary: bool = True
) -> list[Callback]:
    """Instantiate every non-null entry of ``callbacks`` (progress bars and the model summary only
    if the trainer enables them)."""
    callbacks = [
        # _convert_="object": a ``search`` node the callback takes becomes a SearchOptions
        _instantiated(f"callbacks.{name}", lambda spec=spec: instantiate(spec, _convert_="object"))
        for name, spec in (callbacks_cfg or {}).items()
        if spec is not None
    ]
    if not enable_progress_bar:
        callbacks = [c for c in callbacks if not isinstance(c, ProgressBar)]
    if not enable_model_summary:
        callbacks = [c for c in callbacks if not isinstance(c, ModelSummary)]
    return callbacks


def build_run_loggers(logger_cfg: Any) -> list:
    """The ``logger`` group's loggers (:func:`~transformer_nmt.tracking.loggers.build_loggers`)."""
    return _instantiated("logger", lambda: build_loggers(logger_cfg))


def _instantiated(name: str, build):
    try:
        return build()
    except InstantiationException as error:
        raise UsageError(f"{name}: {error.__cause__ or error}") from error


def check_writable_outputs(output_dir: str, callbacks: list[Callback]) -> None:
    """Every directory the run writes into (its output directory, the checkpoint callbacks'
    directories) exists or can be created, and takes a new file: found now, not at the first
    save after an epoch of work."""
    directories = [(Path(output_dir), "the run's output directory (hydra.run.dir=...)")]
    for callback in callbacks:
        if isinstance(callback, ModelCheckpoint) and callback.dirpath:
            directories.append((Path(callback.dirpath), "a checkpoint directory (dirpath)"))
        elif isinstance(callback, LastCheckpoint):
            directories.append((callback.path.parent, "the last.ckpt directory (dirpath)"))
    for directory, what in directories:
        try:
            check_writable_directory(directory)
        except OSError as error:
            raise UsageError(
                f"cannot write into {directory}, {what}: {error.strerror or error}; choose a "
                f"writable directory"
            ) from error


# -- resuming ------------------------------------------------------------------------------------


RESUME_MODES = ("auto", "never")


def resume_mode(value: Any) -> str:
    """``auto`` or ``never`` from ``resume`` (booleans too); null means ``auto`` under the submitit
    launchers (``hydra/launcher=slurm|local``), whose jobs are requeued, and ``never`` otherwise."""
    if value is None:
        return "auto" if under_submitit() else "never"
    if isinstance(value, bool):
        return "auto" if value else "never"
    if value not in RESUME_MODES:
        raise UsageError(f"resume={value} is not an option; use resume=auto or resume=never")
    return value


def resume_checkpoint(cfg: DictConfig, callbacks: list[Callback]) -> str | None:
    """The checkpoint ``fit`` starts from: ``ckpt_path`` if set; else, with ``resume=auto``, the run
    directory's ``last.ckpt`` if one exists (a requeued or restarted job continues)."""
    if cfg.get("ckpt_path"):
        return str(cfg.ckpt_path)
    if resume_mode(cfg.get("resume")) == "never":
        return None
    last = next((c.path for c in callbacks if isinstance(c, LastCheckpoint)), None)
    last = last or Path(cfg.output_dir) / "checkpoints" / "last.ckpt"
    if not last.is_file():
        return None
    log.info("resuming from %s (resume=auto)", last)
    return str(last)


def read_resume_checkpoint(cfg: DictConfig, model: dict, ckpt_path: str | None) -> dict | None:
    """The hyper-parameters and tokenizer files of the checkpoint to resume from, ``ckpt_path``
    (:func:`resume_checkpoint`; None when not resuming), after checking that it fits the
    configured model and direction."""
    if not ckpt_path or str(ckpt_path) in _LIGHTNING_CKPT_NAMES:
        return None
    path = Path(to_absolute_path(str(ckpt_path)))
    checkpoint = read_checkpoint(path, mmap=True)
    if "optimizer_states" not in checkpoint or "loops" not in checkpoint:
        raise CheckpointError(
            f"cannot resume from {path}: it holds the model's weights but no optimizer or loop "
            f"state (an averaged checkpoint?); resume from the last.ckpt of the run instead"
        )
    trained = asdict(model_config(checkpoint, path))
    differing = [
        key
        for key in trained
        if key not in _FROM_TOKENIZER + _TRAINING_OPTIONS
        and trained[key] != model[key]
        and not (_derived(key, trained) and _derived(key, model))
    ]
    if differing:
        theirs = [f"model.{key}={trained[key]}" for key in differing]
        ours = ", ".join(f"model.{key}={model[key]}" for key in differing)
        raise CheckpointError(
            f"cannot resume from {path}: its model was trained with {', '.join(theirs)} but "
            f"this run's config has {ours}; resume with the options it was trained with "
            f"({' '.join(theirs)}), or leave out ckpt_path to start a new run"
        )
    hyper_parameters = checkpoint["hyper_parameters"]
    trained_direction = (hyper_parameters["src_lang"], hyper_parameters["tgt_lang"])
    if trained_direction != (cfg.data.src_lang, cfg.data.tgt_lang):
        raise CheckpointError(
            f"cannot resume from {path}: it translates {'→'.join(trained_direction)} but the "
            f"data config reads {cfg.data.src_lang}→{cfg.data.tgt_lang}; set "
            f"data.src_lang={trained_direction[0]} data.tgt_lang={trained_direction[1]}"
        )
    return {
        "path": path,
        "hyper_parameters": hyper_parameters,
        TOKENIZER_FILES_KEY: checkpoint.get(TOKENIZER_FILES_KEY),
    }


def _derived(key: str, model: dict) -> bool:
    """Whether ``model[key]`` is the value TransformerConfig derives from other options."""
    if key in ("d_k", "d_v"):
        return model[key] * model["n_heads"] == model["d_model"]
    if key in ("n_encoder_layers", "n_decoder_layers"):
        return model[key] == model["n_layers"]
    return False


def require_checkpoint_tokenizer(checkpoint: dict, datamodule) -> None:
    """Refuse to resume a model with another tokenizer than the one it was trained with: the
    BPE is keyed on the corpus, so another corpus gives other token ids under the same weights."""
    problem = tokenizer_mismatch(checkpoint, datamodule.tokenizer)
    if problem is None:
        return
    trained_with = checkpoint_tokenizer_dir(checkpoint)
    raise CheckpointError(
        f"cannot resume from {checkpoint['path']}: its model was trained with tokenizer "
        f"{checkpoint['hyper_parameters']['tokenizer_dir']!r} but the data config gives "
        f"tokenizer {datamodule.tokenizer_dir!r}: {problem}. Resume with the data options of "
        f"the run that wrote it or, to go on training that model on this data, keep its "
        f"tokenizer: data.tokenizer=pretrained data.tokenizer_name={trained_with}"
    )
