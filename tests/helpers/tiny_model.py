"""The one small model: ``conf/model/tiny.yaml``, which ``model=tiny`` runs use too."""

from functools import cache

from omegaconf import OmegaConf

from transformer_nmt.model import TransformerConfig

from . import REPO_ROOT

TINY_YAML = REPO_ROOT / "conf" / "model" / "tiny.yaml"
PAD = 0
# The tests' models: conf/model/tiny.yaml at half its width, so that a test takes less time.
TEST_WIDTH = {"d_model": 32, "d_ff": 64}


@cache
def tiny_model_fields() -> dict:
    """The ``TransformerConfig`` fields ``conf/model/tiny.yaml`` sets (its Hydra defaults list
    aside), at the tests' width."""
    fields = OmegaConf.to_container(OmegaConf.load(TINY_YAML))
    del fields["defaults"]
    return {**fields, **TEST_WIDTH}


def tiny_config(**overrides) -> TransformerConfig:
    """The tiny model with two vocabularies (23 source, 19 target types, so shapes tell them
    apart), PAD = 0, 64 positions (a search that never ends stops within 63 tokens) and each
    stack's depth stated; ``overrides`` replace any field."""
    tiny = tiny_model_fields()
    fields = {
        **tiny,
        "n_encoder_layers": tiny["n_layers"],
        "n_decoder_layers": tiny["n_layers"],
        "src_vocab_size": 23,
        "tgt_vocab_size": 19,
        "pad_id": PAD,
        "share_all_embeddings": False,  # the two vocabularies differ
        "max_len": 64,
        **overrides,
    }
    return TransformerConfig(**fields)
