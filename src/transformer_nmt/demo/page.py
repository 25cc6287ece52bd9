"""The page: an input box, beam size and length penalty, the n-best list with scores, and an
attention heatmap of any hypothesis (kind, layer, one head or the mean over heads).

A problem with the input, or any failure while translating, becomes a message on the page (the
traceback of an unexpected failure goes to the server's log); the server keeps serving.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from .attention import KINDS, MEAN_OVER_HEADS, AttentionMaps, heatmap
from .models import DemoModel, Translation
from .source_text import RejectedText, check_source_text

log = logging.getLogger(__name__)

NBEST_HEADERS = ["rank", "translation", "score", "log p", "tokens"]
NO_ATTENTION = (
    "This engine returns no attention weights: start the page with ckpt_path=… or hf_dir=… "
    "to see them."
)


@dataclass
class PageState:
    """What one browser tab last translated, and the attention computed for it so far."""

    translation: Translation | None = None
    attention: dict[int, AttentionMaps | None] = field(default_factory=dict)


def build_page(model: DemoModel, max_words: int):
    """The ``gr.Blocks`` of the page for ``model``; ``max_words`` bounds the input."""
    import gradio as gr

    options = model.options
    config = getattr(getattr(model, "model", None), "config", None)
    title = f"transformer-nmt: {model.src_lang} → {model.tgt_lang}"
    with gr.Blocks(title=title, analytics_enabled=False) as page:
        gr.Markdown(f"## {title}\n`{model.name}`")
        with gr.Row():
            with gr.Column(scale=3):
                source = gr.Textbox(
                    label=f"Source ({model.src_lang})", lines=2, max_lines=6,
                    placeholder="A man rides a bike down the street.", elem_id="source",
                )  # fmt: skip
                with gr.Row():
                    beam_size = gr.Slider(
                        1, model.most_beams, value=min(options.beam_size, model.most_beams),
                        step=1, label="beam size (1: greedy)", elem_id="beam-size",
                    )  # fmt: skip
                    length_penalty = gr.Number(
                        value=options.length_penalty, minimum=0, step=0.1,
                        label="length penalty α", elem_id="length-penalty",
                    )  # fmt: skip
                translate_button = gr.Button("Translate", variant="primary", elem_id="translate")
            with gr.Column(scale=3):
                translation = gr.Textbox(
                    label=f"Translation ({model.tgt_lang})", lines=2, interactive=False,
                    elem_id="translation",
                )  # fmt: skip
                message = gr.Markdown(elem_id="message")
        nbest = gr.Dataframe(
            headers=NBEST_HEADERS, label="n-best list (score = log p / ((5 + |Y|) / 6)^α)",
            interactive=False, wrap=True, elem_id="nbest",
            column_widths=["7%", "63%", "10%", "10%", "10%"],
        )  # fmt: skip
        state = gr.State(PageState())
        if model.has_attention:
            gr.Markdown(
                "### Attention\nThe chosen hypothesis is fed back through the model (teacher "
                "forcing). Rows are queries, columns keys; a decoder row is labelled by the token "
                "that position predicts. Hover a cell for the token pair and its weight."
            )
            with gr.Row():
                hypothesis = gr.Dropdown(
                    choices=[("1", 0)], value=0, label="hypothesis", elem_id="hypothesis"
                )
                kind = gr.Radio(
                    [(kind.replace("_", " "), kind) for kind in KINDS], value="cross",
                    label="kind", elem_id="kind",
                )  # fmt: skip
                layer = gr.Dropdown(
                    choices=_layer_choices(config.n_decoder_layers), value=0, label="layer",
                    elem_id="layer",
                )  # fmt: skip
                head = gr.Dropdown(
                    choices=[("mean over heads", MEAN_OVER_HEADS)]
                    + [(f"head {i + 1}", str(i)) for i in range(config.n_heads)],
                    value=MEAN_OVER_HEADS, label="head", elem_id="head",
                )  # fmt: skip
            plot = gr.Plot(show_label=False, elem_id="attention")
        else:
            gr.Markdown(f"### Attention\n{NO_ATTENTION}", elem_id="attention-unavailable")

        def translate(text, beam, alpha):
            """Outputs: message, translation, n-best rows, state (+ hypothesis choices, plot)."""
            page_state = PageState()
            error, result = _translate(model, text, beam, alpha, max_words)
            if error:
                rows, text_out, note = [], "", f"**error:** {error}"
            else:
                page_state.translation = result
                rows = _nbest_rows(result)
                text_out = result.candidates[0].text
                note = _notes(result)
            if not model.has_attention:
                return note, text_out, rows, page_state
            choices = [(str(i + 1), i) for i in range(len(rows))] or [("1", 0)]
            figure = None
            if not error:
                figure = _figure(model, page_state, 0, "cross", 0, MEAN_OVER_HEADS)
            return (
                note, text_out, rows, page_state,
                gr.Dropdown(choices=choices, value=0), gr.Radio(value="cross"),
                gr.Dropdown(choices=_layer_choices(config.n_decoder_layers), value=0),
                gr.Dropdown(value=MEAN_OVER_HEADS), figure,
            )  # fmt: skip

        inputs = [source, beam_size, length_penalty]
        outputs = [message, translation, nbest, state]
        if model.has_attention:
            outputs += [hypothesis, kind, layer, head, plot]
        for trigger in (translate_button.click, source.submit):
            trigger(translate, inputs, outputs, show_progress="minimal")

        if model.has_attention:

            def show(page_state, rank, chosen_kind, chosen_layer, chosen_head):
                return _figure(model, page_state, rank, chosen_kind, chosen_layer, chosen_head)

            def new_kind(page_state, rank, chosen_kind, chosen_layer, chosen_head):
                n_layers = (
                    config.n_encoder_layers
                    if chosen_kind == "encoder_self"
                    else config.n_decoder_layers
                )
                chosen_layer = min(int(chosen_layer or 0), n_layers - 1)
                figure = _figure(model, page_state, rank, chosen_kind, chosen_layer, chosen_head)
                return gr.Dropdown(choices=_layer_choices(n_layers), value=chosen_layer), figure

            view = [state, hypothesis, kind, layer, head]
            kind.input(new_kind, view, [layer, plot], show_progress="hidden")
            for control in (hypothesis, layer, head):
                control.input(show, view, plot, show_progress="hidden")
    return page


def warm_up(model: DemoModel, text: str = "A man rides a bike.") -> None:
    """Translate ``text`` and draw its attention once, as the page does, so that the first
    visitor does not wait for the first-call costs (plotly's figure checks, torch's kernels);
    a model that cannot translate fails here, before the page is served."""
    error, translation = _translate(model, text, model.options.beam_size, 0.6, max_words=100)
    if error:
        raise RuntimeError(f"the model failed to translate {text!r}: {error}")
    if model.has_attention:
        _figure(model, PageState(translation), 0, "cross", 0, MEAN_OVER_HEADS)


def _layer_choices(n_layers: int) -> list[tuple[str, int]]:
    return [(str(i + 1), i) for i in range(n_layers)]


def _translate(model: DemoModel, text, beam, alpha, max_words: int):
    """(an error message for the page, or None; the translation, or None)."""
    try:
        line = check_source_text(text, max_words)
        beam = int(beam)
        if not 1 <= beam <= model.most_beams:
            raise RejectedText(f"beam size must be 1 to {model.most_beams}, got {beam}")
        if alpha is None or not 0 <= float(alpha) <= 10:
            raise RejectedText(f"length penalty α must be 0 to 10, got {alpha}")
        return None, model.translate(line, beam, float(alpha))
    except RejectedText as error:
        return str(error), None
    except Exception:
        log.exception("translating %r failed", text)
        return "the model failed on this input (the server's log has the details)", None


def _figure(model: DemoModel, page_state: PageState, rank, kind, layer, head):
    """The heatmap of one view, or None when there is nothing to draw (or drawing failed)."""
    translation = page_state.translation if page_state else None
    if translation is None or rank is None or kind not in KINDS:
        return None
    try:
        rank = min(int(rank), len(translation.candidates) - 1)
        if rank not in page_state.attention:
            page_state.attention[rank] = model.attention(translation, rank)
        maps = page_state.attention[rank]
        if maps is None:
            return None
        layer = min(int(layer or 0), maps.n_layers[kind] - 1)
        return heatmap(maps, kind, layer, head if head is not None else MEAN_OVER_HEADS)
    except Exception:
        log.exception("drawing the attention of %s, hypothesis %s failed", kind, rank)
        return None


def _nbest_rows(translation: Translation) -> list[list]:
    def number(value):
        return "—" if value is None else round(value, 4)

    return [
        [rank, candidate.text, number(candidate.score), number(candidate.log_prob),
         len(candidate.ids)]
        for rank, candidate in enumerate(translation.candidates, start=1)
    ]  # fmt: skip


def _notes(translation: Translation) -> str:
    if translation.source_tokens_cut:
        return (
            f"The source was cut by {translation.source_tokens_cut} tokens to fit the model's "
            f"{len(translation.source_ids)} positions; only its start was translated."
        )
    return ""
