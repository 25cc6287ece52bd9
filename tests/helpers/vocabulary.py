"""What a tokenizer's vocabulary holds."""

import unicodedata


def words_fused_with_punctuation(tokenizer) -> list[str]:
    """The non-special types that hold both a letter or digit and a punctuation mark."""
    return [
        token
        for token in tokenizer.get_vocab()
        if token not in tokenizer.all_special_tokens
        and any(unicodedata.category(c).startswith("P") for c in token)
        and any(c.isalnum() for c in token)
    ]
