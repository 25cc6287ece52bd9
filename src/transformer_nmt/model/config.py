"""Hyper-parameters of the Transformer, validated on construction.

This dataclass is also the schema of the ``model`` config group (``conf/model/``): its defaults are
the only ones, and a YAML option sets just what differs from them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

NORMS = ("post", "pre")
POSITIONALS = ("sinusoidal", "learned")
ATTENTIONS = ("manual", "sdpa")
ACTIVATIONS = ("relu", "swish")


@dataclass
class TransformerConfig:
    """Shapes and variants of the encoder–decoder Transformer.

    The defaults are the paper's base model (Vaswani et al., 2017, Table 3 "base"): N = 6,
    d_model = 512, d_ff = 2048, h = 8, d_k = d_v = 64, P_drop = 0.1, sinusoidal positions,
    post-norm residuals, one embedding matrix shared by source, target and the pre-softmax
    projection. Fields left None are filled on construction: ``d_k`` and ``d_v`` become
    d_model / h, ``n_encoder_layers`` and ``n_decoder_layers`` become ``n_layers``.
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
    positional: str = "sinusoidal"  # or learned (Table 3 row E)
    max_len: int = 1024  # positions the encoder and decoder can take
    share_all_embeddings: bool = True  # one matrix for both embeddings (needs a joint vocabulary)
    tie_embeddings: bool = True  # the pre-softmax projection shares the target embedding (§3.4)
    output_bias: bool = False  # a bias on the pre-softmax projection (Marian's final_logits_bias)
    attention: str = "sdpa"  # sdpa: PyTorch's fused kernel; manual: eq. 1 written out (equal)

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "n_layers"):
            _require_positive(name, getattr(self, name))
        for name in ("d_ff", "max_len"):
            _require_positive(name, getattr(self, name))
        for name in ("n_encoder_layers", "n_decoder_layers"):
            if getattr(self, name) is None:
                setattr(self, name, self.n_layers)
            _require_positive(name, getattr(self, name))
        for name in ("d_k", "d_v"):
            if getattr(self, name) is None:
                if self.d_model % self.n_heads != 0:
                    raise ValueError(
                        f"d_model ({self.d_model}) must be divisible by n_heads "
                        f"({self.n_heads}) so that {name} = d_model / n_heads is whole; change "
                        f"one of them, or set {name} explicitly"
                    )
                setattr(self, name, self.d_model // self.n_heads)
            _require_positive(name, getattr(self, name))
        _require_choice("norm", self.norm, NORMS)
        _require_choice("positional", self.positional, POSITIONALS)
        _require_choice("attention", self.attention, ATTENTIONS)
        _require_choice("activation", self.activation, ACTIVATIONS)
        for name in ("dropout", "attention_dropout"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {value}")
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


def _require_positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _require_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}; got {value!r}")
