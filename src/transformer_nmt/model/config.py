"""Hyper-parameters of the Transformer, validated on construction.

This dataclass is also the schema of the ``model`` config group (``conf/model/``): its defaults are
the only ones, and a YAML option sets just what differs from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

NORMS = ("post", "pre")
NORM_LAYERS = ("layernorm", "rmsnorm")
POSITIONALS = ("sinusoidal", "learned")
ATTENTIONS = ("manual", "sdpa")
ACTIVATIONS = ("relu", "swish")
TOKENIZER_FIELDS = ("src_vocab_size", "tgt_vocab_size", "pad_id")  # the tokenizer decides them
# Options that change no weight: a resumed run may change them, and a model started from a
# pretrained one takes them from the ``model`` config.
WEIGHT_FREE_OPTIONS = ("dropout", "attention_dropout", "attention")


@dataclass
class TransformerConfig:
    """Shapes and variants of the encoder–decoder Transformer.

    The defaults are the paper's base model (Vaswani et al., 2017, Table 3 "base"): N = 6,
    d_model = 512, d_ff = 2048, h = 8, d_k = d_v = 64, P_drop = 0.1, sinusoidal positions,
    post-norm residuals, one embedding matrix shared by source, target and the pre-softmax
    projection. Fields left None are filled on construction: ``d_k`` and ``d_v`` become
    d_model / h, ``n_encoder_layers`` and ``n_decoder_layers`` become ``n_layers``.

    Its parameter count against Table 3's: docs/design.md, "Map of the code".
    """

    src_vocab_size: int  # from the tokenizer
    tgt_vocab_size: int  # from the tokenizer
    pad_id: int  # from the tokenizer
    d_model: int = 512
    n_heads: int = 8  # h
    d_k: int | None = None  # query/key width of one head; Table 3 row (B) varies it alone
    d_v: int | None = None  # value width of one head
    n_layers: int = 6  # N, the layers of each stack
    n_encoder_layers: int | None = None  # the encoder's N, if it differs
    n_decoder_layers: int | None = None  # the decoder's N, if it differs
    d_ff: int = 2048
    activation: str = "relu"  # of the FFN: relu, the paper's max(0, ·); swish: x·σ(x) (Marian)
    dropout: float = 0.1  # P_drop: on each sub-layer output and on the embeddings + positions
    attention_dropout: float = 0.0  # on the attention weights (not in the paper)
    norm: str = "post"  # post: LayerNorm(x + Sublayer(x)), the paper; pre: x + Sublayer(LN(x))
    norm_layer: str = "layernorm"  # LayerNorm, the paper; rmsnorm: RMSNorm (no mean, no bias)
    positional: str = "sinusoidal"  # or learned (Table 3 row E)
    max_len: int = 1024  # positions the encoder and decoder can take
    share_all_embeddings: bool = True  # one matrix for both embeddings (needs a joint vocabulary)
    tie_embeddings: bool = True  # the pre-softmax projection shares the target embedding (§3.4)
    output_bias: bool = False  # a bias on the pre-softmax projection (Marian's final_logits_bias)
    attention: str = "sdpa"  # sdpa: PyTorch's fused kernel; manual: eq. 1 written out (equal)

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size"):
            _require_positive(name, getattr(self, name))
        for name, value in shape_options(asdict(self)).items():
            setattr(self, name, value)
        if not 0 <= self.pad_id < min(self.src_vocab_size, self.tgt_vocab_size):
            raise ValueError(
                f"pad_id ({self.pad_id}) must be a valid token id in both vocabularies "
                f"(0 <= pad_id < {min(self.src_vocab_size, self.tgt_vocab_size)})"
            )
        if self.share_all_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                f"share_all_embeddings=True needs one shared vocabulary, but "
                f"src_vocab_size={self.src_vocab_size} != tgt_vocab_size={self.tgt_vocab_size}; "
                f"use a joint tokenizer or set share_all_embeddings=False"
            )

    def to_dict(self) -> dict:
        return asdict(self)


def shape_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Every field but the tokenizer's, checked, with ``d_k``, ``d_v``, ``n_encoder_layers`` and
    ``n_decoder_layers`` filled in: the model as far as it is known before its vocabulary."""
    shape = {
        f.name: options.get(f.name, f.default) for f in fields(TransformerConfig)
        if f.name not in TOKENIZER_FIELDS
    }  # fmt: skip
    for name in ("d_model", "n_heads", "n_layers", "d_ff", "max_len"):
        _require_positive(name, shape[name])
    for name in ("n_encoder_layers", "n_decoder_layers"):
        if shape[name] is None:
            shape[name] = shape["n_layers"]
        _require_positive(name, shape[name])
    for name in ("d_k", "d_v"):
        if shape[name] is None:
            if shape["d_model"] % shape["n_heads"] != 0:
                raise ValueError(
                    f"d_model ({shape['d_model']}) must be divisible by n_heads "
                    f"({shape['n_heads']}) so that {name} = d_model / n_heads is whole; change "
                    f"one of them, or set {name} explicitly"
                )
            shape[name] = shape["d_model"] // shape["n_heads"]
        _require_positive(name, shape[name])
    _require_choice("norm", shape["norm"], NORMS)
    _require_choice("norm_layer", shape["norm_layer"], NORM_LAYERS)
    _require_choice("positional", shape["positional"], POSITIONALS)
    _require_choice("attention", shape["attention"], ATTENTIONS)
    _require_choice("activation", shape["activation"], ACTIVATIONS)
    for name in ("dropout", "attention_dropout"):
        if not 0.0 <= shape[name] < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {shape[name]}")
    return shape


def _require_positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _require_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}; got {value!r}")
