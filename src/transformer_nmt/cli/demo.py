"""``python demo.py``: a web page to try a model (see :mod:`transformer_nmt.demo`)."""

from __future__ import annotations

import importlib.util
import logging

import torch
from omegaconf import DictConfig

from transformer_nmt.export.errors import MissingDependencyError

from .errors import UsageError
from .loading import (
    check_beam_size,
    load_from_config,
    log_to_stderr,
    resolve_device,
    search_options,
)

log = logging.getLogger(__name__)

MODEL_KEYS = ("ckpt_path", "hf_dir", "model_dir")


def demo_command(cfg: DictConfig) -> None:
    """Load the model, check it translates, then serve the page until interrupted."""
    log_to_stderr()
    logging.getLogger("httpx").setLevel(logging.WARNING)  # Gradio's requests to its own server
    check_page_libraries()
    if not 1 <= cfg.port <= 65535:
        raise UsageError(f"port must be 1 to 65535, got {cfg.port}")
    if cfg.max_words < 1:
        raise UsageError(f"max_words must be a positive integer, got {cfg.max_words}")
    if cfg.threads < 1:
        raise UsageError(f"threads must be a positive integer, got {cfg.threads}")
    torch.set_num_threads(cfg.threads)
    from transformer_nmt.demo.page import build_page, warm_up

    model = load_demo_model(cfg)
    warm_up(model)
    page = build_page(model, cfg.max_words)
    try:
        _, url, _ = page.launch(
            server_name=cfg.host, server_port=cfg.port, show_error=False, quiet=True,
            footer_links=[], theme=page_theme(), prevent_thread_lock=True,
        )  # fmt: skip
    except OSError as error:  # Gradio: "Cannot find empty port …"; or a host not of this machine
        raise UsageError(
            f"cannot serve on {cfg.host}:{cfg.port}: the port is in use (or the host is not "
            f"this machine's); choose another with port=… (or host=…)"
        ) from error
    log.info("%s on %s (Ctrl+C stops it)", model.name, url)
    page.block_thread()


def check_page_libraries() -> None:
    """A :class:`MissingDependencyError` saying how to install Gradio and plotly, unless both
    are installed (found, not imported: Gradio takes seconds to import)."""
    missing = [name for name in ("gradio", "plotly") if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingDependencyError(
            f'the demo needs Gradio and plotly: pip install -e ".[demo]" (missing: '
            f"{', '.join(missing)})"
        )


def load_demo_model(cfg: DictConfig):
    """The model that exactly one of ``ckpt_path``, ``hf_dir`` or ``model_dir`` names."""
    from hydra.utils import to_absolute_path

    from transformer_nmt.demo.models import CheckpointModel, CTranslate2Model

    given = [key for key in MODEL_KEYS if cfg.get(key)]
    if len(given) != 1:
        raise UsageError(
            "say which model to try, with exactly one of ckpt_path=<a checkpoint of train.py>, "
            "hf_dir=<a folder of python export.py format=hf> or model_dir=<a folder of python "
            f"export.py format=ct2>{f' (got {len(given)}: {given})' if given else ''}"
        )
    options = search_options(cfg)
    device = resolve_device(cfg.device)
    if cfg.get("model_dir"):
        from transformer_nmt.evaluation import CTranslate2Translator

        translator = CTranslate2Translator(to_absolute_path(cfg.model_dir), options, device=device)
        model = CTranslate2Model(translator)
    else:
        if cfg.get("ckpt_path"):
            checkpoint = load_from_config(cfg, device)
        else:
            from transformer_nmt.export.marian_import import import_marian

            checkpoint = import_marian(to_absolute_path(cfg.hf_dir))
            checkpoint.model.to(device)
        check_beam_size(options, checkpoint.model, checkpoint.bos_id, checkpoint.eos_id)
        model = CheckpointModel(checkpoint, options)
    model.name = str(cfg[given[0]])  # the page names the model as the command line did
    return model


def page_theme():
    """Gradio's default look with the system's fonts: the page loads nothing from the web."""
    import gradio as gr

    fonts = ["ui-sans-serif", "system-ui", "sans-serif"]
    return gr.themes.Default(font=fonts, font_mono=["ui-monospace", "monospace"])
