"""The toy parallel corpus: word-for-word English/German sentence pairs, and their files."""

from __future__ import annotations

import gzip
import random
from pathlib import Path

EN_DE = {
    "a": "ein", "man": "Mann", "woman": "Frau", "dog": "Hund", "plays": "spielt",
    "with": "mit", "the": "dem", "ball": "Ball", "in": "im", "park": "Park",
    "red": "roten", "small": "kleinen", "child": "Kind", "runs": "rennt", "and": "und",
    "sits": "sitzt", "on": "auf", "bench": "Bank", "two": "zwei", "people": "Leute",
}  # fmt: skip
# Multi30k's file names, as conf/data/multi30k.yaml names them.
MULTI30K_FILE_NAMES = {"train": "train", "val": "val", "test": "test_2016_flickr"}
LONG_PAIR_INDEX = 7  # the training pair of flawed_splits() far longer than the tests' max_len
EMPTY_PAIR_INDEX = 11  # the training pair of flawed_splits() whose German side is empty

Pairs = list[tuple[str, str]]


def make_pairs(
    n: int, seed: int, *, min_words: int = 1, max_words: int = 8, capitalised: bool = True
) -> Pairs:
    """``n`` deterministic pairs of ``min_words`` to ``max_words`` words.

    Capitalised pairs read as sentences ("A dog runs." / "Ein hund rennt."); the others are
    lowercase words and a separate final " ." token, which a tiny model learns fastest.
    """
    rng = random.Random(seed)
    words = list(EN_DE)
    pairs = []
    for _ in range(n):
        en_words = [rng.choice(words) for _ in range(rng.randint(min_words, max_words))]
        en, de = " ".join(en_words), " ".join(EN_DE[w] for w in en_words)
        if capitalised:
            pairs.append((en.capitalize() + ".", de.capitalize() + "."))
        else:
            pairs.append((en + " .", de + " ."))
    return pairs


def flawed_splits() -> dict[str, Pairs]:
    """Capitalised pairs of 1 to 14 words; train holds one over-long and one half-empty pair."""
    train = make_pairs(240, seed=1, max_words=14)
    long_en = " ".join(["the small red dog runs in the park"] * 12)
    train[LONG_PAIR_INDEX] = (long_en + ".", " ".join(["der kleine rote Hund"] * 20) + ".")
    train[EMPTY_PAIR_INDEX] = ("A dog.", "")
    val, test = make_pairs(30, seed=2, max_words=14), make_pairs(25, seed=3, max_words=14)
    return {"train": train, "val": val, "test": test}


def write_lines(path: Path, lines: list[str]) -> None:
    """One line per string, UTF-8; gzip-compressed when the name ends in ``.gz``."""
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)


def write_corpus(
    directory: Path,
    splits: dict[str, Pairs],
    *,
    file_names: dict[str, str] | None = None,
    gzip_train: bool = False,
) -> Path:
    """``{name}.en`` / ``{name}.de`` per split, named by ``file_names`` (default: the split)."""
    directory.mkdir(parents=True, exist_ok=True)
    for split, pairs in splits.items():
        name = (file_names or {}).get(split, split)
        suffix = ".gz" if gzip_train and split == "train" else ""
        write_lines(directory / f"{name}.en{suffix}", [en for en, _ in pairs])
        write_lines(directory / f"{name}.de{suffix}", [de for _, de in pairs])
    return directory
