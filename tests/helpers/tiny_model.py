"""The one small model configuration: dozens of forward passes per second on a CPU."""

from transformer_nmt.model import TransformerConfig

PAD = 0


def tiny_config(**overrides) -> TransformerConfig:
    """Two layers per stack of width 32, four heads and two vocabularies (23 source, 19 target
    types, so shapes tell them apart); ``overrides`` replace any field."""
    fields = dict(
        src_vocab_size=23,
        tgt_vocab_size=19,
        d_model=32,
        n_heads=4,
        n_encoder_layers=2,
        n_decoder_layers=2,
        d_ff=64,
        dropout=0.1,
        max_len=64,
        pad_id=PAD,
        share_all_embeddings=False,  # the two vocabularies differ
    )
    fields.update(overrides)
    return TransformerConfig(**fields)
