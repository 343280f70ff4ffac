"""The on-disk caches of the data path: text read once, BPE trained once, tokenised splits built once.

Each test checks what the cache guarantees: the same result as building from scratch (against the tokenizer's own
`__call__` as the reference), reuse without recomputation, a new key when the data or the tokenizer changes, and
that a build killed half-way is never read back.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from hf_vaswani_training import data as data_module
from hf_vaswani_training import data_cache
from hf_vaswani_training import tokenizer as tokenizer_module
from hf_vaswani_training.arguments import DataArguments
from hf_vaswani_training.data import load_parallel_data
from hf_vaswani_training.data_cache import LongSentencesError, sequence_lengths, tokenize_to_cache
from hf_vaswani_training.tokenizer import load_or_train_tokenizer

SOURCES = ["ein kleiner Hund läuft .", "zwei Katzen schlafen", "der Mann liest ein Buch über Hunde und Katzen ."]
TARGETS = ["a small dog runs .", "two cats sleep", "the man reads a book about dogs and cats ."]


def _write_pair(folder, sources=SOURCES, targets=TARGETS, repeat=20):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.de").write_text("\n".join(sources * repeat) + "\n", encoding="utf-8")
    (folder / "train.en").write_text("\n".join(targets * repeat) + "\n", encoding="utf-8")
    (folder / "valid.de").write_text("\n".join(sources) + "\n", encoding="utf-8")
    (folder / "valid.en").write_text("\n".join(targets) + "\n", encoding="utf-8")
    return folder


def _load(folder, cache):
    return load_parallel_data(
        DataArguments(source_lang="de", target_lang="en", data_dir=folder), cache_dir=cache
    ).splits


def _tokenizer(raw, cache=None, vocab_size=60):
    return load_or_train_tokenizer(None, raw["train"], "de", "en", vocab_size=vocab_size, cache_dir=cache)


def _tokenize(raw, tokenizer, cache, **kwargs):
    settings = {"max_source_length": 64, "max_target_length": 64, "long_sentences": "truncate", **kwargs}
    return tokenize_to_cache(raw, tokenizer, "de", "en", cache_root=cache, batch_size=7, **settings)


def _cache_folders(cache):
    return sorted(p.name for p in cache.glob("tokenized-*"))


def test_ids_equal_the_tokenizers_own_call_and_are_compact(tmp_path):
    raw = _load(_write_pair(tmp_path / "data"), tmp_path / "cache")
    tokenizer = _tokenizer(raw)
    tokenized = _tokenize(raw, tokenizer, tmp_path / "cache")
    train = tokenized["train"]
    assert train.column_names == ["input_ids", "labels"]
    assert train.features["input_ids"].feature.dtype == "uint16"  # a 60-token vocabulary fits 16 bits
    pairs = raw["train"]["translation"]
    assert train["input_ids"] == tokenizer([p["de"] for p in pairs])["input_ids"]
    assert train["labels"] == tokenizer(text_target=[p["en"] for p in pairs])["input_ids"]
    assert tokenized["validation"].num_rows == 3


def test_second_run_reuses_text_bpe_and_tokens_without_recomputing(tmp_path, monkeypatch):
    folder, cache = _write_pair(tmp_path / "data"), tmp_path / "cache"
    raw = _load(folder, cache)
    tokenizer = _tokenizer(raw, cache)
    first = _tokenize(raw, tokenizer, cache)

    def forbidden(*args, **kwargs):
        raise AssertionError("recomputed although the cache matches")

    monkeypatch.setattr(data_module, "_iter_lines", forbidden)
    monkeypatch.setattr(tokenizer_module, "train_joint_bpe", forbidden)
    monkeypatch.setattr(data_cache._SplitBuilder, "_encode", forbidden)
    raw_again = _load(folder, cache)
    tokenizer_again = _tokenizer(raw_again, cache)
    second = _tokenize(raw_again, tokenizer_again, cache)
    assert tokenizer_again.get_vocab() == tokenizer.get_vocab()
    assert second["train"]["input_ids"] == first["train"]["input_ids"]
    assert second["train"]["labels"] == first["train"]["labels"]
    assert len(_cache_folders(cache)) == 1


def test_changed_data_or_tokenizer_or_settings_make_a_new_cache(tmp_path):
    folder, cache = _write_pair(tmp_path / "data"), tmp_path / "cache"
    raw = _load(folder, cache)
    tokenizer = _tokenizer(raw)
    _tokenize(raw, tokenizer, cache)
    assert len(_cache_folders(cache)) == 1

    _tokenize(raw, _tokenizer(raw, vocab_size=50), cache)  # another tokenizer
    assert len(_cache_folders(cache)) == 2
    _tokenize(raw, tokenizer, cache, max_source_length=5)  # another length limit
    assert len(_cache_folders(cache)) == 3

    # The same file names and sizes with other content: same-size edits must not hit the old cache.
    swapped = [s[::-1] for s in SOURCES]
    _write_pair(folder, sources=swapped)
    raw_changed = _load(folder, cache)
    assert raw_changed["train"][0]["translation"]["de"] == swapped[0]
    changed = _tokenize(raw_changed, tokenizer, cache)
    assert len(_cache_folders(cache)) == 4
    assert changed["train"]["input_ids"][0] == tokenizer(swapped[0])["input_ids"]


def test_a_failed_build_leaves_no_cache(tmp_path, monkeypatch):
    raw = _load(_write_pair(tmp_path / "data"), tmp_path / "cache")
    tokenizer = _tokenizer(raw)
    cache = tmp_path / "tok"
    calls = []
    original = data_cache._SplitBuilder._encode

    def fail_on_the_third_call(self, texts, target):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # like Ctrl-C half-way through the split
        return original(self, texts, target)

    monkeypatch.setattr(data_cache._SplitBuilder, "_encode", fail_on_the_third_call)
    with pytest.raises(KeyboardInterrupt):
        _tokenize(raw, tokenizer, cache)
    assert list(cache.iterdir()) == []  # neither a cache folder nor a staging folder
    monkeypatch.setattr(data_cache._SplitBuilder, "_encode", original)
    assert _tokenize(raw, tokenizer, cache)["train"].num_rows == 60


@pytest.mark.slow
def test_a_killed_build_is_never_reused(tmp_path):
    """SIGKILL mid-build (no cleanup runs): the next run ignores the staging folder and builds a whole cache."""
    folder, cache = _write_pair(tmp_path / "data", repeat=200), tmp_path / "cache"
    started = tmp_path / "started"
    script = textwrap.dedent(
        f"""
        import time
        from hf_vaswani_training import data_cache
        from hf_vaswani_training.arguments import DataArguments
        from hf_vaswani_training.data import load_parallel_data
        from hf_vaswani_training.tokenizer import load_or_train_tokenizer
        source = DataArguments(source_lang="de", target_lang="en", data_dir={str(folder)!r})
        raw = load_parallel_data(source, cache_dir={str(cache)!r}).splits
        tok = load_or_train_tokenizer(None, raw["train"], "de", "en", vocab_size=60)
        original = data_cache._SplitBuilder._encode
        def slow(self, texts, target):
            open({str(started)!r}, "w").close()
            time.sleep(0.5)
            return original(self, texts, target)
        data_cache._SplitBuilder._encode = slow
        data_cache.tokenize_to_cache(raw, tok, "de", "en", 64, 64, cache_root={str(cache)!r}, batch_size=10)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], env=dict(os.environ, TOKENIZERS_PARALLELISM="false"))
    try:
        deadline = time.monotonic() + 120
        while not started.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert started.exists(), "the child never started tokenising"
        time.sleep(1.0)  # a few batches into the split
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert _cache_folders(cache) == []  # only the staging folder was written
    assert list(cache.glob(".tmp-tokenized-*")), "expected the killed run's staging folder"

    raw = _load(folder, cache)
    tokenizer = _tokenizer(raw)
    tokenized = _tokenize(raw, tokenizer, cache)
    assert tokenized["train"].num_rows == 600
    assert tokenized["train"]["input_ids"][-1] == tokenizer(SOURCES[-1])["input_ids"]


def test_long_sentence_policies_keep_eos_drop_or_stop(tmp_path):
    raw = _load(_write_pair(tmp_path / "data"), tmp_path / "cache")
    tokenizer = _tokenizer(raw)
    eos = tokenizer.eos_token_id
    full = tokenizer([p["de"] for p in raw["train"]["translation"]])["input_ids"]
    full_targets = tokenizer([p["en"] for p in raw["train"]["translation"]])["input_ids"]
    limit = max(len(full[1]), len(full_targets[1]))  # the short second pair fits, the other two do not
    too_long = [len(s) > limit or len(t) > limit for s, t in zip(full, full_targets, strict=True)]
    assert any(too_long) and not all(too_long)

    truncated = _tokenize(raw, tokenizer, tmp_path / "t", max_source_length=limit, max_target_length=limit)["train"]
    assert truncated.num_rows == 60
    for ids, reference in zip(truncated["input_ids"], full, strict=True):
        assert len(ids) <= limit and ids[-1] == eos and ids[:-1] == reference[: len(ids) - 1]

    skipped = _tokenize(raw, tokenizer, tmp_path / "s", max_source_length=limit, max_target_length=limit,
                        long_sentences="skip")["train"]  # fmt: skip
    assert skipped["input_ids"] == [ids for ids, long in zip(full, too_long, strict=True) if not long]

    with pytest.raises(LongSentencesError, match=rf"{sum(too_long)} of 60 training pairs .* first is pair 0"):
        _tokenize(raw, tokenizer, tmp_path / "e", max_source_length=limit, max_target_length=limit,
                  long_sentences="error")  # fmt: skip
    assert _cache_folders(tmp_path / "e") == []


def test_sequence_lengths_follow_select_and_filter(tmp_path):
    raw = _load(_write_pair(tmp_path / "data"), tmp_path / "cache")
    train = _tokenize(raw, _tokenizer(raw), tmp_path / "cache")["train"]
    subset = train.select([5, 0, 3]).filter(lambda ids: len(ids) > 3, input_columns="input_ids")
    lengths = sequence_lengths(subset, "input_ids")
    assert lengths.dtype == np.int64
    assert lengths.tolist() == [len(ids) for ids in subset["input_ids"]]


def test_in_memory_data_is_tokenised_without_a_cache(tmp_path):
    raw = load_parallel_data(DataArguments(toy_num_train=50, toy_num_validation=5, toy_num_test=5), seed=1).splits
    tokenizer = load_or_train_tokenizer(None, raw["train"], "en", "tt", vocab_size=80, cache_dir=tmp_path)
    tokenized = tokenize_to_cache(raw, tokenizer, "en", "tt", 1024, 1024, cache_root=tmp_path)
    assert tokenized["train"]["input_ids"] == tokenizer([p["en"] for p in raw["train"]["translation"]])["input_ids"]
    assert list(tmp_path.iterdir()) == []  # nothing identifies in-memory data across runs


def test_word_cache_encodes_like_the_tokenizer_on_awkward_text(tmp_path):
    """Word-by-word encoding (the fast path for the joint BPE) against the tokenizer's own call, past verification."""
    from datasets import Dataset, DatasetDict

    raw = _load(_write_pair(tmp_path / "data"), tmp_path / "cache")
    tokenizer = _tokenizer(raw, vocab_size=80)
    assert data_cache._WordCache.for_backend(tokenizer.backend_tokenizer) is not None
    awkward = ["a  b", "Hund , läuft.", "ﬁsh \u00a0x", "x\ty", "▁a▁b c", "end ", " start", "Ｆull ＡＢ", "e\u0301 café"]
    plain = SOURCES * 3
    pairs = [{"de": text, "en": "x"} for text in plain + awkward]  # the first batch (verified) is plain text
    dataset = Dataset.from_dict({"translation": pairs})
    tokenized = tokenize_to_cache(DatasetDict({"validation": dataset}), tokenizer, "de", "en", 512, 512, batch_size=9)
    assert tokenized["validation"]["input_ids"] == tokenizer(plain + awkward)["input_ids"]
