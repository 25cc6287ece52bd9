"""Hyper-parameters of the Transformer, validated on construction."""

from __future__ import annotations

from dataclasses import asdict, dataclass

NORMS = ("post", "pre")
POSITIONALS = ("sinusoidal", "learned")
ATTENTIONS = ("manual", "sdpa")


@dataclass
class TransformerConfig:
    """Shapes and variants of the encoder–decoder Transformer.

    Defaults are the paper's base model (Vaswani et al., 2017, Table 3 "base").
    ``d_head`` (the paper's d_k = d_v) defaults to ``d_model // n_heads``; set it to run
    Table 3 row (B), where d_k changes while d_model and h stay fixed.
    """

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 512
    n_heads: int = 8
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    attention_dropout: float = 0.0
    norm: str = "post"
    positional: str = "sinusoidal"
    max_len: int = 256
    pad_id: int = 0
    tie_embeddings: bool = True
    share_all_embeddings: bool = False
    attention: str = "sdpa"  # fused kernel; "manual" writes out eq. 1 (same numbers, tested)
    d_head: int | None = None

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "d_ff", "max_len"):
            _require_positive(name, getattr(self, name))
        for name in ("n_encoder_layers", "n_decoder_layers"):
            _require_positive(name, getattr(self, name))
        _require_choice("norm", self.norm, NORMS)
        _require_choice("positional", self.positional, POSITIONALS)
        _require_choice("attention", self.attention, ATTENTIONS)
        for name in ("dropout", "attention_dropout"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {value}")
        if self.d_head is None:
            if self.d_model % self.n_heads != 0:
                raise ValueError(
                    f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}) "
                    f"so that d_k = d_model / n_heads is whole; change one of them, "
                    f"or set d_head explicitly"
                )
        else:
            _require_positive("d_head", self.d_head)
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

    @property
    def head_dim(self) -> int:
        """d_k = d_v, the width of one attention head."""
        return self.d_head if self.d_head is not None else self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)


def _require_positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _require_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}; got {value!r}")
