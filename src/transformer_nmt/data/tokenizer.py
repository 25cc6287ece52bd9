"""Tokenizers: a cached joint BPE trained offline, or any pretrained ``AutoTokenizer``.

Whatever the kind, the tokenizer handed out has ``pad_token_id``, ``eos_token_id`` and a
``bos_token_id`` that is the *decoder start* id: for Marian (no BOS token) that is its
``config.decoder_start_token_id``, which equals its pad id.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from transformer_nmt.atomic import COMPLETE_MARKER, build_directory_atomically, is_complete
from transformer_nmt.data.errors import DataError
from transformer_nmt.data.fingerprints import fingerprint

log = logging.getLogger(__name__)

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
BPE_FORMAT_VERSION = 2  # 2: punctuation and digits are pre-tokenised apart from words
_BPE_MIN_FREQUENCY = 2
_WEIGHT_SUFFIXES = {".bin", ".safetensors", ".pt", ".h5", ".msgpack", ".onnx"}
_MAX_EMBEDDED_BYTES = 16 << 20
_BPE_ALPHABET_LIMIT = 1000  # rarer characters map to <unk> instead of filling the vocabulary
# Sentences whose ids tell tokenizers apart beyond their vocabularies: case, digits, punctuation,
# accents, Unicode forms that NFKC changes, other scripts, runs of spaces, special-token text.
_IDENTITY_PROBES = (
    "The quick brown fox jumps over the lazy dog.",
    "Zwei Männer spielen Fußball im Park, 3,5 km² für 12 € (ca. 20%)!",
    "Ça coûte 10 000 F — n'est-ce pas ? « Oui », dit-elle.",
    "ﬁnal ｆｕｌｌｗｉｄｔｈ Ⅻ ½ x² ﬀ ſ",
    "日本語のテキスト。 Русский текст. Ελληνικά. العربية 🙂",
    "  two  spaces\tand a tab, UPPER lower MiXeD 0123456789",
    "<s> </s> <pad> <unk>",
)


class SpecialIds(NamedTuple):
    """The special token ids the model and the batches agree on."""

    pad: int
    bos: int  # the decoder start id
    eos: int


def special_ids(tokenizer) -> SpecialIds:
    """The pad / decoder-start / eos ids of a tokenizer returned by this module."""
    return SpecialIds(tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id)


def bpe_cache_entry(
    cache_dir: Path, corpus_fingerprint: str, vocab_size: int, sample_pairs: int | None
) -> Path:
    """Where the BPE trained on a corpus (fingerprint) with these options is cached."""
    key = fingerprint("bpe", BPE_FORMAT_VERSION, corpus_fingerprint, vocab_size, sample_pairs)
    return cache_dir / "tokenizers" / f"bpe{vocab_size}-{key}"


def load_or_train_bpe(
    entry: Path, vocab_size: int, training_texts: Callable[[], Iterable[list[str]]]
) -> tuple[object, bool]:
    """Load the cached BPE at ``entry``, training and publishing it first if needed.

    ``training_texts`` returns an iterable of batches of sentences (streamed, never all held at
    once) and is only called on a cache miss; it may raise :class:`DataError` when exhausted to
    refuse the corpus, and then nothing is published. Returns the tokenizer and whether it was
    trained by this call (False when another process trained it while this one waited).
    """
    trained = False
    if not is_complete(entry):

        def build(tmp_dir: Path) -> None:
            nonlocal trained
            started = time.perf_counter()
            counted = _Counted(training_texts())
            bpe = train_bpe(counted, vocab_size)
            bpe.save_pretrained(tmp_dir)
            trained = True
            log.info(
                "trained joint BPE (%d types) on %d sentences in %.1f s",
                len(bpe),
                counted.sentences,
                time.perf_counter() - started,
            )

        info = {"kind": "bpe", "vocab_size": vocab_size, "format": BPE_FORMAT_VERSION}
        build_directory_atomically(entry, build, info)
    return load_tokenizer(str(entry)), trained


class _Counted:
    """Iterates over batches of sentences, counting the sentences."""

    def __init__(self, batches: Iterable[list[str]]) -> None:
        self.batches, self.sentences = batches, 0

    def __iter__(self) -> Iterator[list[str]]:
        for batch in self.batches:
            self.sentences += len(batch)
            yield batch


def train_bpe(texts: Iterable[str] | Iterable[list[str]], vocab_size: int):
    """Train a joint BPE as a fast tokenizer, streaming ``texts`` (sentences, or batches of them).

    NFKC-normalised text; words are split off at spaces (SentencePiece-style ``▁`` marks a word
    start), punctuation marks become tokens of their own and digits are split one by one, as
    in standard NMT BPE set-ups, so that "street." and "street" share "▁street". Decoding
    inverts this exactly (``decode(encode(s)) == NFKC(s)``) except that a literal ``▁`` in the
    text decodes as a space, and characters outside the alphabet become ``<unk>``.
    """
    from tokenizers import Tokenizer, decoders, models, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE(unk_token=UNK))
    bpe.normalizer, bpe.pre_tokenizer = _bpe_normalizer(), _bpe_pre_tokenizer()
    bpe.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=_BPE_MIN_FREQUENCY,
        limit_alphabet=_BPE_ALPHABET_LIMIT,
        special_tokens=[PAD, BOS, EOS, UNK],
        show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        clean_up_tokenization_spaces=False,
    )


def _bpe_normalizer():
    from tokenizers import normalizers

    return normalizers.NFKC()


def _bpe_pre_tokenizer():
    from tokenizers import pre_tokenizers

    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(),  # "▁" for every space and before the first word
            pre_tokenizers.Punctuation("isolated"),
            pre_tokenizers.Digits(individual_digits=True),
        ]
    )


def splits_at_spaces(tokenizer) -> bool:
    """Whether ``tokenizer`` normalises and pre-tokenises as :func:`train_bpe`'s BPE does: then
    a sentence's ids are its space-separated words' ids, one after the other."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or backend.normalizer is None or backend.pre_tokenizer is None:
        return False
    return (
        backend.normalizer.__getstate__() == _bpe_normalizer().__getstate__()
        and backend.pre_tokenizer.__getstate__() == _bpe_pre_tokenizer().__getstate__()
    )


def load_tokenizer(tokenizer_dir: str):
    """Load a tokenizer saved by this pipeline (a BPE cache dir) or any ``AutoTokenizer`` name.

    The result's ``bos_token_id`` is the decoder start id (see the module docstring), so
    ``special_ids(load_tokenizer(dm.tokenizer_dir)) == (dm.pad_id, dm.bos_id, dm.eos_id)``.
    """
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    except OSError as error:
        raise DataError(
            f"cannot load tokenizer {tokenizer_dir!r}: {error}. With no network it must be in "
            f"the Hugging Face cache already (run once online), or be a local directory saved "
            f"with save_pretrained; tokenizer=bpe trains one offline instead"
        ) from error
    decoder_start = _decoder_start_id(tokenizer_dir, tokenizer)
    if tokenizer.pad_token_id is None or tokenizer.eos_token_id is None:
        raise DataError(
            f"tokenizer {tokenizer_dir!r} needs a pad and an eos token, has pad="
            f"{tokenizer.pad_token!r} eos={tokenizer.eos_token!r}"
        )
    if tokenizer.bos_token_id != decoder_start:
        tokenizer.bos_token = tokenizer.convert_ids_to_tokens(decoder_start)
    return tokenizer


def tokenizer_files(tokenizer_dir: str) -> dict[str, bytes] | None:
    """The files of a local tokenizer directory, to embed in a checkpoint so that it travels
    with the model; None for a Hub name (or a directory holding model weights too)."""
    path = Path(tokenizer_dir)
    if not path.is_dir():
        return None
    files = [f for f in sorted(path.iterdir()) if f.is_file() and f.name != COMPLETE_MARKER]
    if any(f.suffix in _WEIGHT_SUFFIXES for f in files):
        return None
    if sum(f.stat().st_size for f in files) > _MAX_EMBEDDED_BYTES:
        return None
    return {f.name: f.read_bytes() for f in files}


def restore_tokenizer(files: dict[str, bytes], cache_dir: Path) -> Path:
    """Write tokenizer files embedded in a checkpoint into a cache entry keyed by their content;
    returns the directory, which :func:`load_tokenizer` accepts."""
    key = fingerprint(
        "embedded", sorted((name, hashlib.sha256(data).hexdigest()) for name, data in files.items())
    )
    entry = Path(cache_dir) / "tokenizers" / f"embedded-{key}"

    def build(tmp_dir: Path) -> None:
        for name, data in files.items():
            (tmp_dir / Path(name).name).write_bytes(data)

    return build_directory_atomically(entry, build, {"kind": "embedded"})


def _decoder_start_id(tokenizer_dir: str, tokenizer) -> int:
    """The model config's ``decoder_start_token_id`` if there is one, else the BOS id."""
    from transformers import AutoConfig

    local = Path(tokenizer_dir)
    decoder_start = None
    if not local.is_dir() or (local / "config.json").is_file():
        try:
            config = AutoConfig.from_pretrained(tokenizer_dir)
            decoder_start = getattr(config, "decoder_start_token_id", None)
        except (OSError, ValueError) as error:
            log.warning("no model config for %s (%s); using its BOS token", tokenizer_dir, error)
    if decoder_start is None:
        decoder_start = tokenizer.bos_token_id
    if decoder_start is None:
        raise DataError(
            f"cannot tell the decoder start token of tokenizer {tokenizer_dir!r}: it has no BOS "
            f"token and no model config with decoder_start_token_id was found next to it"
        )
    return int(decoder_start)


def tokenizer_fingerprint(tokenizer) -> str:
    """A digest of what decides the token ids a tokenizer produces, as its serialisation: the key
    of the encoded-split cache (see :func:`tokenizer_identity` for comparing checkpoints)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return fingerprint("backend", backend.to_str())
    vocab = sorted(tokenizer.get_vocab().items())
    return fingerprint(type(tokenizer).__name__, tokenizer.name_or_path, vocab)


def tokenizer_identity(tokenizer) -> str:
    """Which tokenizer this is, as a model trained with it sees it: a digest of its vocabulary
    (token → id) and of the ids it gives a fixed set of probe sentences.

    A checkpoint stores it (``hyper_parameters["tokenizer_identity"]``) so that a different
    tokenizer of the same size is refused. Unlike :func:`tokenizer_fingerprint` it depends on
    behaviour only, not on the file layout, the library version that saved the files, where they
    were loaded from, or truncation settings left on the tokenizer by an earlier call.
    """
    vocabulary = sorted(tokenizer.get_vocab().items())
    probes = tokenizer(list(_IDENTITY_PROBES), add_special_tokens=False)["input_ids"]
    return fingerprint("tokenizer-identity", vocabulary, probes)
