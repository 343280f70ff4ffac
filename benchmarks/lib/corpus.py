"""A deterministic synthetic corpus shaped like WMT 2014 en-de, for the benchmarks that need WMT's size or shape
without its download: two "languages", sentence lengths with a mean of about 22 words and a tail to 230,
Zipf-distributed words drawn from several hundred thousand types built from syllables so that BPE has something to
merge. Used by benchmarks/data_scale.py (the data path at scale) and benchmarks/gpu.py (the GPU runs).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

# Syllables per "language": the second has umlauts and ß so the two scripts differ as German and English do.
_SYLLABLES = {
    "en": "th an er on re in ed nd ha at en es of or nt ea ti to it st io le is ou ar as de rt ve".split()
    + "b c d f g h k l m n p r s t w y a e i o u".split(),
    "de": "ei ch sch en er un ge be ie au ä ö ü ß st zu in de te ne re an ig ung lich keit".split()
    + "b d f g h k l m n p r s t w z a e i o u".split(),
}
MEAN_WORDS, MAX_WORDS = 22, 230


def _word_types(lang: str, num_types: int, seed: int) -> np.ndarray:
    """`num_types` distinct words, shortest for the most frequent ranks (as in natural languages)."""
    rng = np.random.default_rng(seed)
    syllables = np.array(_SYLLABLES[lang], dtype=object)
    words: list[str] = []
    seen: set[str] = set()
    start = 0
    while len(words) < num_types:
        # Candidates in bulk: 1 syllable for the top ranks, up to 6 for the rare tail; duplicates are skipped.
        ranks = np.arange(start, start + num_types)
        counts = rng.integers(1, 2 + np.minimum(5, np.log10(ranks + 10).astype(np.int64)))
        picks = syllables[rng.integers(0, len(syllables), size=(num_types, 6))]
        for row, count in zip(picks.tolist(), counts.tolist(), strict=True):
            word = "".join(row[:count])
            if word not in seen:
                seen.add(word)
                words.append(word)
                if len(words) == num_types:
                    break
        start += num_types
    return np.array(words, dtype=object)


def _sentence_lengths(rng: np.random.Generator, n: int) -> np.ndarray:
    # Log-normal with median ~17 and mean ~22 words, clipped to [1, 230]: WMT14 en-de's shape.
    lengths = np.exp(rng.normal(np.log(17.0), 0.72, size=n))
    return np.clip(np.rint(lengths), 1, MAX_WORDS).astype(np.int64)


def write_corpus(
    folder: Path, num_pairs: int, num_types: int = 350_000, seed: int = 0, eval_pairs: tuple[int, int] = (3000, 3003)
) -> Path:
    """Write `folder/{train,valid,test}.{en,de}` unless already complete; return the folder.

    `eval_pairs` are the sizes of valid and test (newstest2013 and newstest2014 have 3,000 and 3,003 pairs).
    """
    done = folder / "COMPLETE"
    if done.is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    splits = {"train": num_pairs, "valid": eval_pairs[0], "test": eval_pairs[1]}
    vocab = {lang: _word_types(lang, num_types, seed + i) for i, lang in enumerate(("en", "de"))}
    # Zipf's law with exponent 1.0 over the ranks: the sampling CDF, shared by both languages.
    weights = 1.0 / np.arange(1, num_types + 1)
    cdf = np.cumsum(weights) / weights.sum()
    rng = np.random.default_rng(seed)
    chunk = 100_000
    for split, size in splits.items():
        handles = {lang: open(folder / f"{split}.{lang}", "w", encoding="utf-8") for lang in vocab}  # noqa: SIM115
        try:
            for start in range(0, size, chunk):
                n = min(chunk, size - start)
                source_lengths = _sentence_lengths(rng, n)
                # The target has roughly the source's length (a translation), not an independent one.
                target_lengths = np.clip(
                    np.rint(source_lengths * np.exp(rng.normal(0.0, 0.15, size=n))), 1, MAX_WORDS
                ).astype(np.int64)
                for lang, lengths in (("en", source_lengths), ("de", target_lengths)):
                    ids = np.searchsorted(cdf, rng.random(int(lengths.sum())))
                    words = vocab[lang][np.minimum(ids, num_types - 1)].tolist()
                    ends = np.cumsum(lengths).tolist()
                    begin = 0
                    lines = []
                    for end in ends:
                        lines.append(" ".join(words[begin:end]) + " .")
                        begin = end
                    handles[lang].write("\n".join(lines) + "\n")
        finally:
            for handle in handles.values():
                handle.close()
    done.write_text(json.dumps({"num_pairs": num_pairs, "num_types": num_types, "seed": seed}) + "\n")
    return folder
