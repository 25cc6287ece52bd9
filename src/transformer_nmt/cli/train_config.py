"""``train.py``'s config, checked before any data work, and the pieces built from it.

Every option is checked before the corpus is read or the BPE trained, which can take minutes:
unknown keys (:func:`check_known_keys`, the one such check), the model's shape (its vocabulary
is the tokenizer's, so the model config itself is built once the data is ready:
:func:`build_model_config`), the data, search, final evaluation, optimizer and scheduler
options, the trainer's arguments, the callbacks and loggers. The directories the run writes into
must be writable, and a checkpoint to resume from must fit the configured model
(:func:`plan_resume`). Each problem is a :class:`UsageError` or ``CheckpointError`` naming the
option and the fix.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass, fields, replace
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
from transformer_nmt.model.config import TOKENIZER_FIELDS, WEIGHT_FREE_OPTIONS, shape_options
from transformer_nmt.tracking.loggers import build_loggers
from transformer_nmt.tracking.objective import final_eval_for
from transformer_nmt.tracking.overrides import job_overrides
from transformer_nmt.training.optimizer import AdamConfig
from transformer_nmt.training.schedules import StepSchedule

from .config_schemas import SCHEMAS
from .errors import UsageError

log = logging.getLogger(__name__)

# Lightning's own ckpt_path values, resolved by the Trainer (nothing to read beforehand).
_LIGHTNING_CKPT_NAMES = ("last", "best", "hpc", "registry")
# TranslationModule arguments that come from the data and the run, not from the ``module`` node.
_MODULE_ARGUMENTS_FROM_DATA = (
    "model_config", "tokenizer_dir", "src_lang", "tgt_lang", "bos_id", "eos_id", "pad_id",
    "tokenizer_identity", "run_config",
)  # fmt: skip


@dataclass
class TrainConfig:
    """The checked pieces of a ``train.py`` config."""

    data: DataConfig
    model: dict  # model_options(): the shape checked, the tokenizer's fields None unless set
    search: SearchOptions
    final_eval: FinalEvalConfig
    trainer: dict  # lightning.pytorch.Trainer keyword arguments
    callbacks: list[Callback]


def check_config(cfg: DictConfig) -> TrainConfig:
    """Check every option of a ``train.py`` config and build what needs no data."""
    check_known_keys(cfg)
    data = _checked("data", lambda: OmegaConf.to_object(cfg.data))
    model = model_options(cfg.model, data.max_len)
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


def check_known_keys(cfg: DictConfig) -> None:
    """Refuse a key no schema has: ``+data.max_token=…`` would otherwise be ignored (Hydra's
    ``+`` adds keys even to a typed node, and ``to_object`` drops them)."""
    import lightning.pytorch as pl

    from transformer_nmt.training.module import TranslationModule

    known = {name: {f.name for f in fields(schema)} for name, schema in SCHEMAS.items()}
    known["trainer"] = set(inspect.signature(pl.Trainer.__init__).parameters) - {"self"}
    known["module"] = {"_target_", "_partial_"} | (
        set(inspect.signature(TranslationModule.__init__).parameters)
        - {"self", *_MODULE_ARGUMENTS_FROM_DATA}
    )
    for name, keys in known.items():
        unknown = sorted(set(cfg.get(name) or {}) - keys)
        if unknown:
            raise UsageError(f"unknown {name} option(s) {unknown}; valid keys are {sorted(keys)}")
    check_added_top_level_keys(job_overrides(), primary_config_keys())


def check_added_top_level_keys(overrides: list[str], known: set[str] | None) -> None:
    """Refuse ``+key=value`` at a top-level key no config has (``+foo=1``, or a typo such as
    ``+label_smothing=0.2``): nothing reads it. ``known``: the primary config's keys and groups
    (None: unknown, no check)."""
    if known is None:
        return
    for override in overrides:
        if not override.startswith("+") or override.startswith("++"):
            continue
        key = override[1:].split("=", 1)[0]
        top = key.split("@", 1)[0].split(".", 1)[0].split("/", 1)[0]
        if top == "hydra" or top in known:
            continue
        raise UsageError(
            f"+{key}: there is no top-level key {top!r}, so nothing would read it; the top-level "
            f"keys are {sorted(known)}"
        )


def primary_config_keys() -> set[str] | None:
    """The top-level keys of the running Hydra app's primary config (``conf/train.yaml``): its
    own keys, those its defaults list fills, and the config groups of its directory; None
    outside a Hydra job."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    hydra_cfg = HydraConfig.get()
    sources = [s.path for s in hydra_cfg.runtime.config_sources if s.provider == "main"]
    if not sources or not hydra_cfg.job.config_name:
        return None
    config_dir = Path(sources[0])
    primary = OmegaConf.load(config_dir / f"{hydra_cfg.job.config_name}.yaml")
    keys = {key for key in primary if key != "defaults"}
    for entry in primary.get("defaults", []):
        name = next(iter(entry)) if isinstance(entry, DictConfig) else str(entry)
        keys.add(name.rsplit("@", 1)[-1] if "@" in name else name.split("/")[0])
    keys |= {group.name for group in config_dir.iterdir() if group.is_dir()}
    return keys - {"_self_"}


def _checked(name: str, build):
    try:
        return build()
    except (TypeError, ValueError) as error:
        raise UsageError(f"{name}: {error}") from error


def model_options(model_cfg: Any, data_max_len: int) -> dict:
    """Every ``TransformerConfig`` field as a plain dict, checked as far as it can be without the
    vocabulary (:func:`~transformer_nmt.model.config.shape_options`): the tokenizer's fields
    (vocabulary sizes, pad id) are None unless the ``model`` config sets them."""
    options = (
        OmegaConf.to_container(model_cfg, resolve=True, throw_on_missing=False)
        if OmegaConf.is_config(model_cfg)
        else dict(model_cfg)
    )
    tokenizer = {key: options.get(key) for key in TOKENIZER_FIELDS}
    tokenizer = {key: None if value == "???" else value for key, value in tokenizer.items()}
    shape = _checked("model", lambda: shape_options(options))
    if shape["max_len"] < data_max_len:
        raise UsageError(
            f"model.max_len={shape['max_len']} is shorter than data.max_len={data_max_len}: the "
            f"decoder needs a position for every target token; raise model.max_len or lower "
            f"data.max_len"
        )
    return {**tokenizer, **shape}


def build_model_config(options: dict, vocab_size: int, pad_id: int) -> TransformerConfig:
    """The model config of :func:`model_options` with the tokenizer's vocabulary size and pad id.

    The ``model`` config leaves ``src_vocab_size``, ``tgt_vocab_size`` and ``pad_id`` unset
    (``???``): they are the tokenizer's. A value set there must agree with it.
    """
    from_tokenizer = dict(zip(TOKENIZER_FIELDS, (vocab_size, vocab_size, pad_id), strict=True))
    for key, value in from_tokenizer.items():
        if options.get(key) is not None and options[key] != value:
            raise UsageError(
                f"model.{key}={options[key]} but the data's tokenizer has {value}; leave "
                f"model.{key} unset to take it from the data"
            )
    return _checked("model", lambda: TransformerConfig(**{**options, **from_tokenizer}))


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
    for name in WEIGHT_FREE_OPTIONS:
        options[name] = model_cfg[name]
    return options


def trainer_options(trainer_cfg: Any) -> dict:
    """``Trainer`` keyword arguments from the ``trainer`` group, checked; its intervals all
    count optimizer steps.

    ``max_steps`` and ``log_every_n_steps`` are optimizer steps to Lightning too (so is
    ``callbacks.last_checkpoint.every_n_train_steps``); an integer ``val_check_interval`` is
    training batches to Lightning, so it is multiplied here by ``accumulate_grad_batches``, the
    batches of one optimizer step. (A float stays a fraction of an epoch.)
    """
    options = OmegaConf.to_container(trainer_cfg, resolve=True)
    if "use_distributed_sampler" in options:
        raise UsageError(
            "remove trainer.use_distributed_sampler: it is always False, because the data "
            "module shards its token-bucketed batches across ranks itself"
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


@dataclass
class ResumePlan:
    """Where ``fit`` starts: ``ckpt_path`` (None: from scratch) and, when this run read that
    checkpoint, what it needs of the data (:meth:`require_tokenizer`)."""

    ckpt_path: str | None = None
    path: Path | None = None  # the checkpoint read, made absolute
    hyper_parameters: dict | None = None
    tokenizer_files: dict | None = None

    def require_tokenizer(self, datamodule) -> None:
        """Refuse to resume a model with another tokenizer than the one it was trained with: the
        BPE is keyed on the corpus, so another corpus gives other token ids under the same
        weights."""
        if self.hyper_parameters is None:
            return
        checkpoint = {
            "path": self.path,
            "hyper_parameters": self.hyper_parameters,
            TOKENIZER_FILES_KEY: self.tokenizer_files,
        }
        problem = tokenizer_mismatch(checkpoint, datamodule.tokenizer)
        if problem is None:
            return
        raise CheckpointError(
            f"cannot resume from {self.path}: its model was trained with tokenizer "
            f"{self.hyper_parameters['tokenizer_dir']!r} but the data config gives tokenizer "
            f"{datamodule.tokenizer_dir!r}: {problem}. Resume with the data options of the run "
            f"that wrote it or, to go on training that model on this data, keep its tokenizer: "
            f"data.tokenizer=pretrained data.tokenizer_name={checkpoint_tokenizer_dir(checkpoint)}"
        )


def plan_resume(cfg: DictConfig, model: dict, callbacks: list[Callback]) -> ResumePlan:
    """The checkpoint ``fit`` starts from, checked to fit the configured ``model``
    (:func:`model_options`) and direction: ``ckpt_path`` if set; else, with ``resume=auto``,
    the run directory's ``last.ckpt`` if one exists (a requeued or restarted job continues)."""
    ckpt_path = _checkpoint_to_resume(cfg, callbacks)
    if not ckpt_path or ckpt_path in _LIGHTNING_CKPT_NAMES:
        return ResumePlan(ckpt_path)
    path = Path(to_absolute_path(ckpt_path))
    checkpoint = read_checkpoint(path, mmap=True)
    if "optimizer_states" not in checkpoint or "loops" not in checkpoint:
        raise CheckpointError(
            f"cannot resume from {path}: it holds the model's weights but no optimizer or loop "
            f"state (an averaged checkpoint?); resume from the last.ckpt of the run instead"
        )
    trained = model_config(checkpoint, path).to_dict()
    differing = [
        key
        for key in trained
        if key not in TOKENIZER_FIELDS + WEIGHT_FREE_OPTIONS
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
    return ResumePlan(ckpt_path, path, hyper_parameters, checkpoint.get(TOKENIZER_FILES_KEY))


def _checkpoint_to_resume(cfg: DictConfig, callbacks: list[Callback]) -> str | None:
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


def _derived(key: str, model: dict) -> bool:
    """Whether ``model[key]`` is the value TransformerConfig derives from other options."""
    if key in ("d_k", "d_v"):
        return model[key] * model["n_heads"] == model["d_model"]
    if key in ("n_encoder_layers", "n_decoder_layers"):
        return model[key] == model["n_layers"]
    return False
