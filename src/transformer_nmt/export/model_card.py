"""The ``README.md`` of an exported Hugging Face folder: the Hub's metadata header, how to use
the model, and how ``generate`` differs from the search it was trained and evaluated with."""

from __future__ import annotations

import json

from .metadata import ExportMetadata

ARCHITECTURE_CLASSES = {"marian": "MarianMTModel", "pegasus": "PegasusForConditionalGeneration"}


def model_card(metadata: ExportMetadata, generation_config) -> str:
    """Markdown with a YAML header (languages, ``pipeline_tag: translation``)."""
    config = metadata.config
    class_name = ARCHITECTURE_CLASSES[metadata.format]
    header = {
        "language": [metadata.src_lang, metadata.tgt_lang],
        "library_name": "transformers",
        "pipeline_tag": "translation",
        "tags": ["translation", "transformer-nmt", metadata.format],
    }
    beams = generation_config.num_beams
    search = "greedy search" if beams == 1 else f"beam search with {beams} beams"
    lines = [
        "---",
        *(f"{key}: {json.dumps(value)}" for key, value in header.items()),
        "---",
        "",
        f"# {metadata.src_lang}→{metadata.tgt_lang} Transformer ({class_name})",
        "",
        f"An encoder–decoder Transformer ({config.norm}-norm, d_model {config.d_model}, "
        f"{config.n_heads} heads, {config.n_encoder_layers}+{config.n_decoder_layers} layers, "
        f"d_ff {config.d_ff}, a vocabulary of {config.tgt_vocab_size}) trained with "
        f"transformer-nmt and exported to `{class_name}`. Its hidden units are stored in the "
        "order of this architecture's sinusoids, so it computes the trained model's function.",
        "",
        "```python",
        "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer",
        "",
        'tokenizer = AutoTokenizer.from_pretrained("<this folder or Hub id>")',
        'model = AutoModelForSeq2SeqLM.from_pretrained("<this folder or Hub id>")',
        'batch = tokenizer(["A sentence to translate."], return_tensors="pt", padding=True)',
        "out = model.generate(**batch, max_new_tokens=batch.input_ids.shape[1] + 50)",
        "print(tokenizer.batch_decode(out, skip_special_tokens=True))",
        "```",
        "",
        "transformers 5 has no `translation` pipeline: call `generate` as above.",
        "",
        "## Decoding",
        "",
        f"`generation_config.json` runs {search} as transformer-nmt does: the decoder starts "
        "with its own start symbol, padding and the start symbol are never generated, and no "
        "EOS is forced. Two differences remain:",
        "",
        "* transformer-nmt stops each sentence after ⌊a·|source| + b⌋ tokens (a = 1, b = 50 by "
        "default); `generate` has one `max_new_tokens` per call, so pass the longest source "
        "length + 50, as above.",
        "* transformer-nmt ranks finished beams by log p / ((5 + |Y|) / 6)^α (GNMT); "
        "`generate` by log p / |Y|^length_penalty. The two agree exactly for "
        "`length_penalty=0.0`, and may pick another of the finished beams otherwise.",
        "",
    ]
    return "\n".join(lines)
