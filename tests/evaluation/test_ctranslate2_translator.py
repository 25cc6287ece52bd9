"""``engine=ct2`` beam search: one CTranslate2 call per batch gives what a call per distinct
length limit gives, decoding again only the sentences whose search reached their own limit."""

import pytest

from tests.helpers.run_if import run_if
from transformer_nmt.decoding import SearchOptions

pytestmark = run_if(package="ctranslate2")


def translator(directory, **options):
    from transformer_nmt.evaluation import CTranslate2Translator

    return CTranslate2Translator(directory, SearchOptions(**options))


def sources_of(toy) -> list[list[int]]:
    from transformer_nmt.evaluation import Translator

    return Translator.from_checkpoint(toy.checkpoint).encode(toy.val_texts)


def one_call_per_limit(ct2, sources) -> list[list[int]]:
    """The exact reference: every group of sentences sharing a limit decoded in its own call."""
    outputs = [[] for _ in sources]
    limits = [ct2.limit(len(source)) for source in sources]
    for limit in sorted(set(limits)):
        rows = [i for i, row_limit in enumerate(limits) if row_limit == limit]
        pieces = [[ct2.tokens[t] for t in sources[i][:-1]] for i in rows]
        for i, found in zip(rows, ct2._search(pieces, limit), strict=True):
            outputs[i] = ct2._best_by_gnmt(found)
    return outputs


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize(
    "limits",
    [dict(max_len_a=1.0, max_len_b=50), dict(max_len_a=0.5, max_len_b=2), dict(max_len_a=1.2)],
)
def test_one_call_per_batch_equals_one_call_per_limit(norm, limits, toys, ct2_dirs):
    sources = sources_of(toys[norm])
    options = dict(beam_size=4, length_penalty=0.6, batch_size=64, **limits)
    ct2 = translator(ct2_dirs[(norm, "float32")], **options)
    assert len({ct2.limit(len(source)) for source in sources}) > 3  # many limits in a batch
    assert ct2.translate_ids(sources) == one_call_per_limit(ct2, sources)
    if limits.get("max_len_b") == 2:  # limits that bind: some sentences are decoded again
        assert 0 < ct2.decoded_again < len(sources)
