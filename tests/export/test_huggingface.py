"""The Hugging Face export: loads without project code, computes our logits, and generates our
greedy and (α = 0) beam-search outputs token for token; unsupported shapes fail once."""

import ast
import json
import os
import subprocess
import sys

import pytest
import torch

from tests.helpers import REPO_ROOT
from tests.helpers.tiny_model import tiny_config
from tests.helpers.toy_checkpoint import pad_rows, train_toy_checkpoint
from transformer_nmt.decoding import SearchOptions, max_output_lengths, translate_token_ids
from transformer_nmt.export import UnsupportedModelError, export_huggingface, hf_parameters
from transformer_nmt.export.huggingface import check_huggingface_compatible, hf_logits
from transformer_nmt.export.metadata import METADATA_FILE
from transformer_nmt.export.verification import our_logits, probe_batch

NORMS = ("post", "pre")


def hf_generate(hf_model, sources: list[list[int]], checkpoint, **options) -> list[list[int]]:
    """HF ``generate`` with our per-sentence length limit: one call per group of sources of one
    length, ``max_new_tokens`` = that group's ⌊a·|src| + b⌋. Outputs as ours: no start symbol,
    nothing from the EOS on."""
    search = SearchOptions(
        **{k: options.pop(k) for k in ("max_len_a", "max_len_b") if k in options}
    )
    outputs: list = [None] * len(sources)
    groups: dict[int, list[int]] = {}
    for i, source in enumerate(sources):
        groups.setdefault(len(source), []).append(i)
    for rows in groups.values():
        batch = pad_rows([sources[i] for i in rows], checkpoint.pad_id)
        limit = max_output_lengths(
            batch[:1], checkpoint.pad_id, search.max_len_a, search.max_len_b, 10**6
        )
        with torch.inference_mode():
            generated = hf_model.generate(
                input_ids=batch,
                attention_mask=batch != checkpoint.pad_id,
                max_new_tokens=int(limit[0]),
                **options,
            )
        for i, row in zip(rows, generated.tolist(), strict=True):
            tokens = row[1:]
            if checkpoint.eos_id in tokens:
                tokens = tokens[: tokens.index(checkpoint.eos_id)]
            outputs[i] = [t for t in tokens if t != checkpoint.pad_id]
    return outputs


def ours(checkpoint, sources, **options) -> list[list[int]]:
    return translate_token_ids(
        checkpoint.model, sources, checkpoint.bos_id, checkpoint.eos_id, SearchOptions(**options)
    )


def python_block(markdown: str, containing: str) -> str:
    """The first ```python block of ``markdown`` that holds ``containing``."""
    blocks = markdown.split("```python\n")[1:]
    return next(block.split("```")[0] for block in blocks if containing in block)


@pytest.fixture(scope="module")
def reloaded(hf_dirs):
    """(tokenizer, model) of each export, loaded as any HF user would."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    return {
        norm: (AutoTokenizer.from_pretrained(d), AutoModelForSeq2SeqLM.from_pretrained(d).eval())
        for norm, d in hf_dirs.items()
    }


@pytest.mark.slow
def test_loads_and_translates_in_a_fresh_interpreter_without_the_project(hf_dirs, toys):
    """As the README and the model card show (transformers 5 has no translation pipeline), and
    as the tests below decode."""
    toy = toys["post"]
    folder = repr(str(hf_dirs["post"]))
    card = python_block((hf_dirs["post"] / "README.md").read_text(), "generate")
    readme = python_block((REPO_ROOT / "README.md").read_text(), "AutoModelForSeq2SeqLM")
    documented = card.replace('"<this folder or Hub id>"', folder)
    documented += readme.replace('"hf-model"', folder)
    assert documented.count(folder) == 4  # both snippets load this export
    script = documented + (
        "import json, sys\n"
        "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer\n"
        f"folder = {str(hf_dirs['post'])!r}\n"
        "tokenizer = AutoTokenizer.from_pretrained(folder)\n"
        "model = AutoModelForSeq2SeqLM.from_pretrained(folder)\n"
        f"batch = tokenizer({toy.val_texts[:8]!r}, return_tensors='pt', padding=True)\n"
        "out = model.generate(**batch, num_beams=1, max_new_tokens=20)\n"
        "assert not any(name.startswith('transformer_nmt') for name in sys.modules)\n"
        "print(type(model).__name__, json.dumps(tokenizer.batch_decode(out, "
        "skip_special_tokens=True)))\n"
    )
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=environment
    )
    assert result.returncode == 0, result.stderr
    *documented_outputs, last = result.stdout.strip().splitlines()
    printed = [ast.literal_eval(line) for line in documented_outputs]
    assert len(printed) == 2 and all(len(out) == 1 and out[0].strip() for out in printed)
    class_name, translations = last.split(" ", 1)
    assert class_name == "MarianMTModel"
    from transformer_nmt.evaluation import Translator

    translator = Translator.from_checkpoint(toy.checkpoint, beam_size=1, max_len_a=0, max_len_b=20)
    assert json.loads(translations) == translator.translate(toy.val_texts[:8])


@pytest.mark.slow
@pytest.mark.parametrize("norm", NORMS)
def test_architecture_config_and_logits(norm, toys, reloaded):
    toy, (_, hf_model) = toys[norm], reloaded[norm]
    checkpoint = toy.checkpoint
    assert (
        type(hf_model).__name__
        == {"post": "MarianMTModel", "pre": "PegasusForConditionalGeneration"}[norm]
    )
    config, generation = hf_model.config, hf_model.generation_config
    assert config.scale_embedding is True and config.activation_function == "relu"
    assert config.forced_eos_token_id is None and generation.forced_eos_token_id is None
    assert generation.decoder_start_token_id == checkpoint.bos_id
    assert generation.suppress_tokens == sorted({checkpoint.pad_id, checkpoint.bos_id})
    assert (generation.num_beams, generation.length_penalty) == (4, 0.6)
    assert generation.early_stopping is True and generation.max_new_tokens == 63
    src, tgt_in = probe_batch(checkpoint.model.config, *_ids(checkpoint), seed=3)
    expected = our_logits(checkpoint.model, src, tgt_in)
    actual = hf_logits(hf_model, src, tgt_in, checkpoint.pad_id)
    real = tgt_in != checkpoint.pad_id
    torch.testing.assert_close(actual[real], expected[real], atol=1e-4, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("norm", NORMS)
def test_tokenizer_encodes_sources_like_our_translator(norm, toys, reloaded):
    from transformer_nmt.data import load_tokenizer, special_ids
    from transformer_nmt.evaluation import Translator

    toy, (tokenizer, _) = toys[norm], reloaded[norm]
    expected = Translator.from_checkpoint(toy.checkpoint).encode(toy.val_texts)
    assert tokenizer(toy.val_texts)["input_ids"] == expected
    assert tokenizer.model_max_length == toy.checkpoint.model.config.max_len
    ours_again = load_tokenizer(str(tokenizer.name_or_path))  # the project reads the folder too
    assert tuple(special_ids(ours_again)) == (
        toy.checkpoint.pad_id,
        toy.checkpoint.bos_id,
        toy.checkpoint.eos_id,
    )


@pytest.mark.slow
@pytest.mark.parametrize("norm", NORMS)
def test_greedy_equals_ours_token_for_token_on_120_sentences(norm, toys, reloaded):
    """With our default limit ⌊1·|src| + 50⌋, and with a tight one that truncates outputs."""
    toy, (_, hf_model) = toys[norm], reloaded[norm]
    from transformer_nmt.evaluation import Translator

    sources = Translator.from_checkpoint(toy.checkpoint).encode(toy.val_texts)
    assert len(sources) >= 100
    expected = ours(toy.checkpoint, sources, beam_size=1)
    assert hf_generate(hf_model, sources, toy.checkpoint, num_beams=1) == expected
    assert len({len(tokens) for tokens in expected}) > 3  # outputs end by EOS at varying steps
    tight = dict(max_len_a=0.0, max_len_b=5)
    truncated = ours(toy.checkpoint, sources, beam_size=1, **tight)
    assert hf_generate(hf_model, sources, toy.checkpoint, num_beams=1, **tight) == truncated
    assert any(len(t) == 5 for t in truncated) and any(len(t) < 5 for t in truncated)


@pytest.mark.slow
@pytest.mark.parametrize("norm", NORMS)
def test_beam4_equals_ours_when_both_rank_by_log_probability(norm, toys, reloaded):
    """α = 0: HF's logp / |Y|^0 and GNMT's logp / ((5 + |Y|) / 6)^0 are both logp, and both
    stop a sentence at 4 finished hypotheses."""
    toy, (_, hf_model) = toys[norm], reloaded[norm]
    from transformer_nmt.evaluation import Translator

    sources = Translator.from_checkpoint(toy.checkpoint).encode(toy.val_texts)
    expected = ours(toy.checkpoint, sources, beam_size=4, length_penalty=0.0)
    theirs = hf_generate(hf_model, sources, toy.checkpoint, num_beams=4, length_penalty=0.0)
    assert theirs == expected
    greedy = ours(toy.checkpoint, sources, beam_size=1)
    assert sum(a != b for a, b in zip(expected, greedy, strict=True)) >= 10  # beams matter here


@pytest.mark.slow
@pytest.mark.parametrize("norm", NORMS)
def test_beam4_with_a_length_penalty_ranks_by_another_formula(norm, toys, reloaded):
    """α = 0.6: HF's final score is logp / |Y|^α (|Y| with the EOS), not GNMT's; the outputs
    then agree on most sentences (docs/design.md gives the measure)."""
    toy, (_, hf_model) = toys[norm], reloaded[norm]
    checkpoint = toy.checkpoint
    from transformer_nmt.evaluation import Translator

    sources = Translator.from_checkpoint(checkpoint).encode(toy.val_texts)
    batch = pad_rows(sources[:6], checkpoint.pad_id)
    with torch.inference_mode():
        out = hf_model.generate(
            input_ids=batch,
            attention_mask=batch != checkpoint.pad_id,
            max_new_tokens=30,
            return_dict_in_generate=True,
            output_scores=True,
        )
    for source, row, score in zip(
        sources[:6], out.sequences.tolist(), out.sequences_scores, strict=True
    ):
        tokens = row[1 : row.index(checkpoint.eos_id) + 1]  # with the EOS
        logits = our_logits(
            checkpoint.model,
            torch.tensor([source]),
            torch.tensor([[checkpoint.bos_id, *tokens[:-1]]]),
        )
        log_prob = float(logits.log_softmax(-1)[0].gather(1, torch.tensor(tokens)[:, None]).sum())
        assert float(score) == pytest.approx(log_prob / len(tokens) ** 0.6, abs=1e-4)
        assert float(score) != pytest.approx(log_prob / ((5 + len(tokens)) / 6) ** 0.6, abs=1e-3)
    expected = ours(checkpoint, sources, beam_size=4, length_penalty=0.6)
    theirs = hf_generate(hf_model, sources, checkpoint, num_beams=4, length_penalty=0.6)
    assert sum(a == b for a, b in zip(theirs, expected, strict=True)) >= 0.85 * len(sources)


@pytest.mark.slow
@pytest.mark.parametrize("norm", NORMS)
def test_folder_holds_metadata_and_a_model_card(norm, toys, hf_dirs):
    directory = hf_dirs[norm]
    metadata = json.loads((directory / METADATA_FILE).read_text())
    checkpoint = toys[norm].checkpoint
    assert metadata["model_config"] == checkpoint.model.config.to_dict()
    assert (metadata["bos_id"], metadata["src_lang"], metadata["tgt_lang"]) == (
        checkpoint.bos_id,
        "en",
        "de",
    )
    card = (directory / "README.md").read_text()
    assert card.startswith("---\n") and 'pipeline_tag: "translation"' in card
    assert {p.name for p in directory.iterdir()} == {
        "README.md",
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        METADATA_FILE,
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    ("norm", "overrides"),
    [
        ("post", dict(share_all_embeddings=False)),
        ("post", dict(tie_embeddings=False)),
        ("pre", dict(tie_embeddings=False, activation="swish", output_bias=True)),
    ],
)
def test_untied_unshared_swish_and_biased_models_export(norm, overrides, tmp_path):
    toy = train_toy_checkpoint(tmp_path / "toy", norm, steps=20, **overrides)
    before = {k: v.clone() for k, v in toy.checkpoint.model.state_dict().items()}
    directory = export_huggingface(toy.checkpoint, tmp_path / "out")  # verifies the logits
    assert json.loads((directory / "config.json").read_text())["activation_function"] == (
        overrides.get("activation", "relu")
    )
    for key, value in toy.checkpoint.model.state_dict().items():
        assert torch.equal(value, before[key]), key  # our model is left as it was


@pytest.mark.slow
def test_a_failing_export_leaves_nothing_and_an_existing_folder_needs_overwrite(
    workspace, tmp_path, monkeypatch
):
    from transformer_nmt.checkpoint import load_checkpoint

    checkpoint = load_checkpoint(workspace.ckpt_path)
    target = tmp_path / "out"
    monkeypatch.setattr(hf_parameters, "halves_order", lambda d: torch.arange(d))  # wrong layout
    with pytest.raises(RuntimeError, match="logits differ from ours"):
        export_huggingface(checkpoint, target)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    export_huggingface(checkpoint, target)
    with pytest.raises(FileExistsError):
        export_huggingface(checkpoint, target)
    export_huggingface(checkpoint, target, overwrite=True)
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


@pytest.mark.parametrize(
    ("norm", "overrides", "fields"),
    [
        ("post", dict(positional="learned"), ["positional='learned'"]),
        ("post", dict(d_k=4), ["d_k=4, d_v=8"]),
        ("pre", dict(src_vocab_size=23), ["src_vocab_size=23", "share_all_embeddings=False"]),
        ("post", dict(positional="learned", d_k=8, d_v=4), ["positional=", "d_k=8, d_v=4"]),
        ("post", dict(norm_layer="rmsnorm"), ["norm_layer='rmsnorm'"]),
    ],
)
def test_a_shape_hf_cannot_hold_is_one_error_naming_each_field(norm, overrides, fields):
    config = tiny_config(norm=norm, **{"src_vocab_size": 19, **overrides})
    with pytest.raises(UnsupportedModelError) as error:
        check_huggingface_compatible(config)
    message = str(error.value)
    assert "\n" not in message and message.startswith("cannot convert to Hugging Face")
    assert len(error.value.problems) == len(fields)
    for problem, field in zip(error.value.problems, fields, strict=True):
        assert problem.startswith(field)
    assert message.endswith("export format=ct2 instead, which holds every shape of this project")


def test_parameter_map_names_every_parameter_of_ours_once():
    from transformer_nmt.model import Transformer

    for overrides in (
        dict(norm="post"),
        dict(norm="pre", src_vocab_size=19, share_all_embeddings=True),
        dict(norm="post", tie_embeddings=False, output_bias=True),
    ):
        config = tiny_config(**overrides)
        names = {pair.ours for pair in hf_parameters.parameter_map(config)}
        assert names == {name for name, _ in Transformer(config).named_parameters()}


def _ids(checkpoint) -> tuple[int, int, int]:
    return checkpoint.bos_id, checkpoint.eos_id, checkpoint.pad_id
