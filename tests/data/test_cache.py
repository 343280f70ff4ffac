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
from pathlib import Path

import numpy as np
import pytest

from hf_vaswani_training.data import cache as data_cache
from hf_vaswani_training.data import textfiles
from hf_vaswani_training.data import tokenizer as tokenizer_module
from hf_vaswani_training.data.arguments import DataArguments
from hf_vaswani_training.data.cache import LongSentencesError, sequence_lengths, tokenize_to_cache
from hf_vaswani_training.data.corpora import load_parallel_data
from hf_vaswani_training.data.tokenizer import load_or_train_tokenizer

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

    monkeypatch.setattr(textfiles, "iter_lines", forbidden)
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


@pytest.mark.parametrize("num_workers", [1, 2])
def test_a_failed_build_leaves_no_cache(tmp_path, monkeypatch, num_workers):
    """With 2 workers the failure happens in a worker process (the first batch is encoded here, with 2 calls; the
    workers fork with that count), and must reach this process and leave nothing behind just the same."""
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
        _tokenize(raw, tokenizer, cache, num_workers=num_workers)
    assert list(cache.iterdir()) == []  # neither a cache folder nor a staging folder
    monkeypatch.setattr(data_cache._SplitBuilder, "_encode", original)
    assert _tokenize(raw, tokenizer, cache, num_workers=num_workers)["train"].num_rows == 60


def _processes_running(marker: str) -> list[int]:
    """Processes (not zombies) whose command line contains `marker`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker.encode() in (proc / "cmdline").read_bytes():
                if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_a_killed_build_is_never_reused(tmp_path):
    """SIGKILL mid-build (no cleanup runs): the next run ignores the staging folder and builds a whole cache."""
    folder, cache = _write_pair(tmp_path / "data", repeat=200), tmp_path / "cache"
    started = tmp_path / "started"
    script = textwrap.dedent(
        f"""
        import time
        from hf_vaswani_training.data import cache as data_cache
        from hf_vaswani_training.data.arguments import DataArguments
        from hf_vaswani_training.data.corpora import load_parallel_data
        from hf_vaswani_training.data.tokenizer import load_or_train_tokenizer
        source = DataArguments(source_lang="de", target_lang="en", data_dir={str(folder)!r})
        raw = load_parallel_data(source, cache_dir={str(cache)!r}).splits
        tok = load_or_train_tokenizer(None, raw["train"], "de", "en", vocab_size=60)
        original = data_cache._SplitBuilder._encode
        def slow(self, texts, target):
            open({str(started)!r}, "w").close()
            time.sleep(0.5)
            return original(self, texts, target)
        data_cache._SplitBuilder._encode = slow
        data_cache.tokenize_to_cache(raw, tok, "de", "en", 64, 64, cache_root={str(cache)!r}, batch_size=10,
                                     num_workers=2)
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
    deadline = time.monotonic() + 30
    while _processes_running(str(started)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_running(str(started)) == [], "worker processes outlived their killed parent"
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
    assert data_cache.WordCache.for_backend(tokenizer.backend_tokenizer) is not None
    # Batches of 9: the second has no sentence the rule leaves out as a whole (so a `▁` inside a sentence must be
    # caught there), the third has some (empty after NFKC, leading space).
    awkward = ["x ▁a", "Hund ▁▁b", "a ▁", "a\u00a0▁b", "a  b", "Hund , läuft.", "ﬁsh \u00a0x", "x\ty", "e\u0301 café",
               "▁a▁b c", "end ", " start", "Ｆull ＡＢ", "\u00a0a"]  # fmt: skip
    plain = SOURCES * 3
    pairs = [{"de": text, "en": "x"} for text in plain + awkward]  # the first batch (verified) is plain text
    dataset = Dataset.from_dict({"translation": pairs})
    tokenized = tokenize_to_cache(DatasetDict({"validation": dataset}), tokenizer, "de", "en", 512, 512, batch_size=9)
    assert tokenized["validation"]["input_ids"] == tokenizer(plain + awkward)["input_ids"]


def _varied_pair(folder, num_pairs=400):
    """Pairs that all differ (unlike `_write_pair`'s three repeated ones), so a batch written out of order or twice
    changes the file; a few are long, for the long-sentence policies."""
    rng = np.random.default_rng(7)
    words = {"de": "Hund Katze läuft schläft Straße Buch über und der die das ein ﬁsh café".split(),
             "en": "dog cat runs sleeps street book about and the a one fish café".split()}  # fmt: skip
    lines = {"de": [], "en": []}
    for _ in range(num_pairs):
        length = int(rng.integers(1, 40))
        for lang in lines:
            chosen = rng.choice(words[lang], size=length + int(rng.integers(0, 3)))
            lines[lang].append(" ".join(chosen) + rng.choice([" .", "", " ,x", "!"]))
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "valid"):
        for lang in lines:
            (folder / f"{split}.{lang}").write_text("\n".join(lines[lang]) + "\n", encoding="utf-8")
    return folder


@pytest.mark.parametrize("long_sentences", ["truncate", "skip"])
def test_workers_write_the_same_cache_file_as_one_process(tmp_path, long_sentences):
    """Batches encoded in worker processes are written in the split's order: the cache files are byte for byte those
    of one process, and the ids are the tokenizer's own `encode_batch` (truncated or skipped as the policy says)."""
    raw = _load(_varied_pair(tmp_path / "data"), tmp_path / "cache")
    tokenizer = _tokenizer(raw, vocab_size=90)
    assert data_cache.WordCache.for_backend(tokenizer.backend_tokenizer) is not None  # the word-cache path
    limit = 60
    settings = {"max_source_length": limit, "max_target_length": limit, "long_sentences": long_sentences}
    folders = {}
    for workers in (1, 2, 3):
        root = tmp_path / f"workers-{workers}"
        tokenized = _tokenize(raw, tokenizer, root, num_workers=workers, **settings)  # 58 batches of 7 pairs
        (folders[workers],) = root.glob("tokenized-*")
    for workers in (2, 3):
        for name in ("train.arrow", "validation.arrow", "meta.json"):
            assert (folders[workers] / name).read_bytes() == (folders[1] / name).read_bytes(), (workers, name)

    pairs = raw["train"]["translation"]
    backend = tokenizer.backend_tokenizer
    sources = [e.ids for e in backend.encode_batch([p["de"] for p in pairs])]
    targets = [e.ids for e in backend.encode_batch([p["en"] for p in pairs])]
    too_long = [len(s) > limit or len(t) > limit for s, t in zip(sources, targets, strict=True)]
    assert 0 < sum(too_long) < len(pairs)
    if long_sentences == "skip":
        expected = [s for s, long in zip(sources, too_long, strict=True) if not long]
        expected_labels = [t for t, long in zip(targets, too_long, strict=True) if not long]
    else:
        expected = [s if len(s) <= limit else s[: limit - 1] + s[-1:] for s in sources]
        expected_labels = [t if len(t) <= limit else t[: limit - 1] + t[-1:] for t in targets]
    assert tokenized["train"]["input_ids"] == expected
    assert tokenized["train"]["labels"] == expected_labels


def test_workers_stop_on_a_long_sentence_error_like_one_process(tmp_path):
    raw = _load(_varied_pair(tmp_path / "data"), tmp_path / "cache")
    tokenizer = _tokenizer(raw, vocab_size=90)
    messages = []
    for workers in (1, 2):
        with pytest.raises(LongSentencesError) as error:
            _tokenize(raw, tokenizer, tmp_path / f"e{workers}", num_workers=workers, max_source_length=30,
                      max_target_length=30, long_sentences="error")  # fmt: skip
        messages.append(str(error.value))
        assert _cache_folders(tmp_path / f"e{workers}") == []
    assert messages[0] == messages[1]


def test_workers_run_single_threaded_and_leave_this_process_as_it_was(tmp_path, monkeypatch, capfd):
    """Forked after the tokenizer's thread pool ran: the workers encode with TOKENIZERS_PARALLELISM=false (one thread
    each: the workers are the parallelism), this process keeps its own setting (here unset) and its pool, and no worker
    prints tokenizers' "process just got forked" warning (older tokenizers releases print it unless the variable was
    set at the fork)."""
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    raw = _load(_varied_pair(tmp_path / "data"), tmp_path / "cache")
    tokenizer = _tokenizer(raw, vocab_size=90)
    texts = [p["de"] for p in raw["train"]["translation"]]
    before = [e.ids for e in tokenizer.backend_tokenizer.encode_batch(texts)]  # the pool has run before the fork
    record = tmp_path / "encoded-by"
    original = data_cache._SplitBuilder._encode

    def recording(self, texts, target):
        with open(record, "a") as handle:
            handle.write(f"{os.getpid()} {os.environ.get('TOKENIZERS_PARALLELISM')}\n")
        return original(self, texts, target)

    monkeypatch.setattr(data_cache._SplitBuilder, "_encode", recording)
    _tokenize(raw, tokenizer, tmp_path / "tok", num_workers=2)
    calls = [line.split() for line in record.read_text().splitlines()]
    by_workers = {value for pid, value in calls if int(pid) != os.getpid()}
    assert len({int(pid) for pid, _ in calls} - {os.getpid()}) >= 2  # two workers per split (train, validation)
    assert by_workers == {"false"}
    assert {value for pid, value in calls if int(pid) == os.getpid()} == {"None"}
    assert "TOKENIZERS_PARALLELISM" not in os.environ
    assert [e.ids for e in tokenizer.backend_tokenizer.encode_batch(texts)] == before
    assert "forked" not in capfd.readouterr().err


def test_default_workers_follow_rayon_num_threads_or_the_cores(monkeypatch):
    monkeypatch.setenv("RAYON_NUM_THREADS", "3")
    assert data_cache.default_num_workers() == 3
    monkeypatch.delenv("RAYON_NUM_THREADS")
    assert data_cache.default_num_workers() == len(os.sched_getaffinity(0))


def test_bpe_training_sees_the_same_words_with_sentences_joined():
    """The BPE trainer gets each batch as one text joined by spaces (tokenizer._joined): it must count exactly the
    words (pre-tokenizer pieces after NFKC) that the sentences give one by one, awkward starts included."""
    from collections import Counter

    from tokenizers import normalizers

    sentences = (
        SOURCES + TARGETS + ["a  b", " start", "\u00a0nbsp", "\u00a8x", "▁a b", "x ▁a", "end ", "", "\tx", "Ａ b"]
    )
    pipeline = tokenizer_module.train_joint_bpe(sentences * 3, vocab_size=60).backend_tokenizer

    def words(texts):
        counts = Counter()
        for text in texts:
            counts.update(
                w for w, _ in pipeline.pre_tokenizer.pre_tokenize_str(pipeline.normalizer.normalize_str(text))
            )
        return counts

    joined = tokenizer_module._joined(sentences, normalizers.NFKC())
    assert len(joined) < len(sentences)  # some were joined
    assert words(joined) == words(sentences)
