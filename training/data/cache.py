"""Tokenised splits in an on-disk Arrow cache, built batch by batch, reused when nothing changed.

At WMT 2014 size (4.5M pairs en-de, 36M en-fr) the tokenised corpus must neither live in RAM as Python lists nor be
rebuilt on every run. `tokenize_to_cache` reads each split as Arrow record batches (never the whole split as Python
objects), encodes a batch with the Rust tokenizer's `encode_batch_fast` (parallel over the batch on every core), and
appends `input_ids` / `labels` as Arrow list columns of `uint16` (vocabularies up to 65,536) or `int32` to an Arrow
IPC file, the format `datasets.Dataset.from_file` memory-maps. Memory is bounded by one batch, not the corpus.

The cache is a folder `tokenized-<key>` under the cache root; the key hashes everything the result depends on:

* each split's identity: the `datasets` fingerprint of a file-backed dataset (for local text files,
  `training.data` derives it from the files' content hash, or their path, size, mtime and inode when large);
* the tokenizer: its full serialisation (`tokenizer.json`) for fast tokenizers, `datasets`' hash otherwise;
* the length settings: `max_source_length`, `max_target_length`, `long_sentences`, and the languages.

It is written to a temporary folder in the same parent and renamed into place only when complete
(training/staging.py), so a run killed half-way leaves a `.tmp-*` folder that is never read (and is removed by a
build a day later), never a half cache. Nothing is fsynced, so a machine crash can still leave an empty or cut file
behind the rename: opening checks every file (meta.json parses, each split's Arrow file opens with the recorded number
of rows), and a damaged cache is named in a one-line warning and rebuilt.
Datasets held in memory (the embedded toy corpus, `Dataset.from_dict`) have no stable identity and are tokenised
in memory the same way, without a cache.

The attention mask is not stored: it is all ones before padding, and `DataCollatorForSeq2Seq` (through the
tokenizer's `pad`) builds it per batch. Lengths for the token-batch sampler come from the Arrow list offsets
(`sequence_lengths`), not from walking a column in Python.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import logging
import multiprocessing
import os
import shutil
import signal
import sys
import time
from collections import deque
from collections.abc import Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasets import Dataset, Features, Value

from ..staging import remove_stale, staged_folder
from .tokenizer import WordCache, flatten_ids, release_free_heap

logger = logging.getLogger(__name__)

# Bump when the layout or the rules of the tokenised cache change, so older caches are not read.
CACHE_VERSION = 1
LONG_SENTENCE_POLICIES = ("truncate", "skip", "error")
# Pairs per encode_batch call: large enough to keep every core busy, small enough to bound memory (~60 MB).
DEFAULT_BATCH_SIZE = 20_000


class LongSentencesError(ValueError):
    """--long_sentences error and a training pair is longer than the limits; the message names the count and the first."""


def default_num_workers() -> int:
    """Worker processes for tokenising: `RAYON_NUM_THREADS` when set (the tokenizers library's own cap on its threads,
    which `--preprocessing_num_workers` sets in training/train.py), else every core this process may run on."""
    configured = os.environ.get("RAYON_NUM_THREADS", "")
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_cache_root() -> Path:
    """`$HF_DATASETS_CACHE/hf_vaswani`: beside the `datasets` cache, where users already budget disk for data."""
    return Path(datasets.config.HF_DATASETS_CACHE) / "hf_vaswani"


@contextlib.contextmanager
def tokenizers_parallelism() -> Iterator[None]:
    """Let the Rust tokenizer use every core inside the block, then turn its thread pool off for the run.

    Training used to set TOKENIZERS_PARALLELISM=false for the whole run, so tokenising ran on one core. The reason
    for it stands after the data path: a process forked after the Rust thread pool has run (DataLoader workers,
    `datasets` num_proc) cannot use the pool, and tokenizers then disables it with a warning, as a guard against
    deadlocks. The data path runs before any fork, so it may use every core; on leaving the block the variable is
    set to false, so the workers forked later are safe and quiet. A value the user set is left alone.
    """
    if "TOKENIZERS_PARALLELISM" in os.environ:
        yield
        return
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    try:
        yield
    finally:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"


def tokenizer_fingerprint(tokenizer) -> str:
    """A hash of everything that decides the ids the tokenizer produces."""
    digest = hashlib.sha256(type(tokenizer).__name__.encode())
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        digest.update(backend.to_str().encode())
        digest.update(json.dumps(tokenizer.special_tokens_map, sort_keys=True, default=str).encode())
    else:
        from datasets.fingerprint import Hasher

        digest.update(Hasher.hash(tokenizer).encode())
    return digest.hexdigest()[:32]


def dataset_fingerprint(dataset: Dataset) -> str | None:
    """The `datasets` fingerprint of a file-backed dataset; None for one held only in memory."""
    if not dataset.cache_files:
        return None
    return dataset._fingerprint


def sequence_lengths(dataset: Dataset, column: str) -> np.ndarray:
    """Per-example lengths of a list column, from the Arrow offsets (no Python walk over the rows)."""
    lengths = pc.list_value_length(dataset.data.column(column)).to_numpy(zero_copy_only=False)
    indices = getattr(dataset, "_indices", None)
    if indices is not None:  # after select/shuffle/filter the rows are a mapping into the table
        lengths = lengths[indices.column(0).to_numpy()]
    return lengths.astype(np.int64, copy=False)


@dataclass(frozen=True)
class SplitSummary:
    num_examples: int
    num_too_long: int
    first_too_long: int | None


def tokenize_to_cache(
    raw: Mapping[str, Dataset],
    tokenizer,
    source_lang: str,
    target_lang: str,
    max_source_length: int,
    max_target_length: int,
    long_sentences: str = "truncate",
    cache_root: str | os.PathLike[str] | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    num_workers: int | None = None,
) -> dict[str, Dataset]:
    """`input_ids` and `labels` for every split, from a cache when one matches, else built (and cached).

    Pairs longer than `max_source_length` / `max_target_length` (EOS included) are truncated to the limit with
    their EOS kept in every split; in the train split `long_sentences` decides first: "truncate", "skip" (drop the
    pair) or "error" (a ValueError naming the count and the first pair).

    Args:
        raw: split name -> dataset with a `translation` column of `{source_lang: str, target_lang: str}`.
        cache_root: where the cache folders live (default `default_cache_root()`); None together with in-memory
            datasets means no cache.
        batch_size: pairs encoded per call.
        num_workers: processes that tokenise batches side by side (default `default_num_workers()`); 1 tokenises in
            this process only. The ids and the cache file are the same whatever the number.
    """
    if long_sentences not in LONG_SENTENCE_POLICIES:
        raise ValueError(f"long_sentences={long_sentences!r}: expected one of {', '.join(LONG_SENTENCE_POLICIES)}")
    for name, limit in (("max_source_length", max_source_length), ("max_target_length", max_target_length)):
        if limit < 1:
            raise ValueError(f"{name}={limit} must be at least 1 (the EOS token)")
    settings = {
        "version": CACHE_VERSION,
        "languages": [source_lang, target_lang],
        "max_source_length": max_source_length,
        "max_target_length": max_target_length,
        "long_sentences": long_sentences,
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "splits": {split: dataset_fingerprint(dataset) for split, dataset in raw.items()},
    }
    vocab = len(tokenizer)
    id_type = "uint16" if vocab <= np.iinfo(np.uint16).max + 1 else "int32"
    features = Features({"input_ids": datasets.List(Value(id_type)), "labels": datasets.List(Value(id_type))})
    builder = _SplitBuilder(
        tokenizer, source_lang, target_lang, max_source_length, max_target_length, long_sentences, features
    )

    if any(fingerprint is None for fingerprint in settings["splits"].values()):
        # In memory in, in memory out: nothing identifies the data across runs.
        result = {}
        for split, dataset in raw.items():
            table, summary = builder.build(dataset, split, batch_size, sink=None, num_workers=num_workers)
            _report(split, summary, long_sentences)
            result[split] = Dataset(datasets.table.InMemoryTable(table), split=datasets.Split(split))
        return result

    root = Path(cache_root) if cache_root is not None else default_cache_root()
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:24]
    folder = root / f"tokenized-{key}"
    opened = _open_cache(folder, raw) if folder.exists() else None
    if opened is None:
        shutil.rmtree(folder, ignore_errors=True)  # a damaged cache (already named in a warning), or none
        _build_cache(raw, builder, folder, settings, batch_size, long_sentences, num_workers)
        return {split: Dataset.from_file(str(folder / f"{split}.arrow"), split=datasets.Split(split)) for split in raw}
    summaries, splits = opened
    logger.info("tokenised splits from the cache %s", folder)
    for split, summary in summaries.items():
        _report(split, summary, long_sentences)
    return splits


def _read_complete(folder: Path) -> dict[str, SplitSummary] | None:
    """The split summaries of meta.json; None when there is none or it does not parse."""
    meta = folder / "meta.json"
    if not meta.is_file():
        return None
    try:
        stored = json.loads(meta.read_text())
        return {split: SplitSummary(**summary) for split, summary in stored["splits"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _open_cache(folder: Path, raw: Mapping[str, Dataset]) -> tuple[dict[str, SplitSummary], dict[str, Dataset]] | None:
    """The cache in `folder` opened and checked: meta.json parses and names the splits of `raw`, and every
    `SPLIT.arrow` opens with the recorded number of examples and the id columns. A damaged cache (what a crash without
    fsync leaves: an empty or cut file) gives a one-line warning naming it, and None: the caller rebuilds it."""
    try:
        summaries = _read_complete(folder)
        if summaries is None:
            raise ValueError("meta.json is missing or does not parse")
        if set(summaries) != set(raw):
            raise ValueError(f"meta.json has the splits {sorted(summaries)}, not {sorted(raw)}")
        splits = {}
        for split in raw:
            dataset = Dataset.from_file(str(folder / f"{split}.arrow"), split=datasets.Split(split))
            if dataset.column_names != ["input_ids", "labels"] or dataset.num_rows != summaries[split].num_examples:
                raise ValueError(
                    f"{split}.arrow has {dataset.num_rows} rows of {dataset.column_names}, meta.json says "
                    f"{summaries[split].num_examples} of input_ids, labels"
                )
            splits[split] = dataset
    except (OSError, ValueError, pa.ArrowException) as error:
        text = str(error).strip()
        reason = text.splitlines()[0] if text else type(error).__name__
        logger.warning("the tokenised-data cache %s is damaged (%s); rebuilding it", folder, reason)
        return None
    return summaries, splits


def _build_cache(raw, builder, folder: Path, settings: dict, batch_size: int, long_sentences: str, num_workers):
    remove_stale(folder.parent, "tokenized-")
    started = time.monotonic()
    # Another process (a second rank) may finish the same cache first; theirs is identical and kept when whole.
    with staged_folder(folder, is_complete=lambda found: _read_complete(found) is not None) as staging:
        summaries = {}
        for split, dataset in raw.items():
            _, summary = builder.build(
                dataset, split, batch_size, sink=staging / f"{split}.arrow", num_workers=num_workers
            )
            _report(split, summary, long_sentences)
            summaries[split] = summary
        meta = {"settings": settings, "splits": {split: vars(s) for split, s in summaries.items()}}
        (staging / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    logger.info("tokenised %d splits in %.1fs into %s", len(summaries), time.monotonic() - started, folder)
    return summaries


def _report(split: str, summary: SplitSummary, long_sentences: str) -> None:
    if split != "train" or not summary.num_too_long:
        return
    where = (
        f"{summary.num_too_long} of {summary.num_examples + (summary.num_too_long if long_sentences == 'skip' else 0)}"
        " training pairs exceed --max_source_length/--max_target_length"
    )
    if long_sentences == "error":
        raise LongSentencesError(
            f"{where} (the first is pair {summary.first_too_long}); --long_sentences error stops here"
        )
    if long_sentences == "skip":
        logger.warning("%s: skipped them (--long_sentences skip)", where)
    else:
        logger.warning("%s: truncated them (--long_sentences truncate)", where)


class _SplitBuilder:
    def __init__(self, tokenizer, source_lang, target_lang, max_source_length, max_target_length, policy, features):
        self.tokenizer = tokenizer
        self.source_lang, self.target_lang = source_lang, target_lang
        self.limits = (max_source_length, max_target_length)
        self.policy = policy
        self.features = features
        self.schema = features.arrow_schema
        self.value_type = self.schema.field("input_ids").type.value_type
        self.dtype = np.uint16 if self.value_type == pa.uint16() else np.int32
        # The plain Rust-backed class (the project's joint BPE) encodes sources and targets alike, and its __call__
        # without options is the backend's encode with special tokens; calling the backend directly skips the
        # per-sentence BatchEncoding conversion (a third of the time). Anything else (a Marian-style tokenizer
        # with a target vocabulary, a slow tokenizer) goes through its own __call__ / text_target.
        backend = getattr(tokenizer, "backend_tokenizer", None)
        plain = type(tokenizer).__name__ in ("TokenizersBackend", "PreTrainedTokenizerFast")
        self.backend = backend if plain and backend.truncation is None and backend.padding is None else None
        self.words = WordCache.for_backend(self.backend) if self.backend is not None else None

    def _encode(self, texts: list[str], target: bool) -> tuple[np.ndarray, np.ndarray]:
        """(ids per sentence, all ids concatenated) of `texts`: the lengths and the values of an Arrow list column."""
        if self.words is not None:
            return self.words.encode(texts)
        if self.backend is not None:
            encode = getattr(self.backend, "encode_batch_fast", self.backend.encode_batch)
            return flatten_ids([encoding.ids for encoding in encode(texts, add_special_tokens=True)])
        if target:
            return flatten_ids(self.tokenizer(text_target=texts)["input_ids"])
        return flatten_ids(self.tokenizer(texts)["input_ids"])

    def build(
        self, dataset: Dataset, split: str, batch_size: int, sink: Path | None, num_workers: int | None = None
    ) -> tuple[pa.Table | None, SplitSummary]:
        """Tokenise one split into `sink` (an Arrow IPC stream file) or, when None, into a returned table.

        Batches are encoded by `num_workers` processes (see `_encoded_batches`) and written here in the order of the
        split, so the file is the same as one process writes.
        """
        if "translation" not in dataset.column_names:
            raise ValueError(f"the {split} split has no 'translation' column (columns: {dataset.column_names})")
        apply_policy = split == "train"
        kept = too_long_count = seen = 0
        first_too_long = None
        batches: list[pa.RecordBatch] = []
        writer = pa.ipc.new_stream(str(sink), self.schema) if sink is not None else None
        try:
            for start, num_rows, batch, too_long in self._encoded_batches(
                dataset, batch_size, num_workers, apply_policy
            ):
                if too_long.size:
                    if first_too_long is None:
                        first_too_long = start + int(too_long[0])
                    if apply_policy:
                        too_long_count += too_long.size
                seen += num_rows
                if apply_policy and self.policy == "error" and too_long_count:
                    continue  # only the count matters now; the split is not written
                kept += batch.num_rows
                if writer is not None:
                    writer.write_batch(batch)
                else:
                    batches.append(batch)
        finally:
            if writer is not None:
                writer.close()
        summary = SplitSummary(kept, too_long_count, first_too_long if too_long_count else None)
        if apply_policy and self.policy == "error" and too_long_count:
            _report(split, SplitSummary(seen, too_long_count, first_too_long), "error")
        table = pa.Table.from_batches(batches, schema=self.schema) if writer is None else None
        return table, summary

    def _encoded_batches(
        self, dataset: Dataset, batch_size: int, num_workers: int | None, apply_policy: bool
    ) -> Iterator[tuple[int, int, pa.RecordBatch, np.ndarray]]:
        """(first row, rows read, encoded batch, rows too long) for each `batch_size` rows of the split, in order.

        The first batch is encoded here (the word cache verifies itself on it with the tokenizer's thread pool);
        with more than one worker, the rest go to forked worker processes, which inherit the verified, warm word
        cache and the memory-mapped split, read their rows themselves, and send back only the encoded batch. At most
        two batches per worker are in flight, so memory stays bounded by a few batches.
        """
        arrow = dataset.with_format("arrow")
        ranges = [(start, min(start + batch_size, len(arrow))) for start in range(0, len(arrow), batch_size)]
        if not ranges:
            return
        workers = min(num_workers or default_num_workers(), len(ranges) - 1)
        if workers <= 1 or not _CAN_FORK:
            for start, stop in ranges:
                yield start, stop - start, *self._encode_rows(arrow[start:stop], apply_policy)
            return
        start, stop = ranges[0]
        yield start, stop - start, *self._encode_rows(arrow[start:stop], apply_policy)
        pending: deque = deque()
        executor = ProcessPoolExecutor(
            workers,
            mp_context=multiprocessing.get_context("fork"),
            initializer=_worker_init,
            initargs=(self, arrow, os.getpid()),
        )
        try:
            todo = iter(ranges[1:])

            def submit_next() -> None:
                start_stop = next(todo, None)
                if start_stop is not None:
                    pending.append((*start_stop, executor.submit(_worker_encode, *start_stop, apply_policy)))

            # The workers are forked on the first submission: fork with the tokenizer's pool off in their environment
            # (a forked child has none of the parent's pool threads, and tokenizers would otherwise warn and turn it
            # off itself); this process keeps its own setting and its working pool.
            # gc.freeze: the workers' garbage collector then never walks (and so never copies, page by page) the
            # objects they share with this process copy-on-write.
            release_free_heap()  # pages the workers would otherwise share and count as theirs
            gc.freeze()
            try:
                with _environment("TOKENIZERS_PARALLELISM", "false"):
                    submit_next()
            finally:
                gc.unfreeze()
            for _ in range(2 * workers - 1):
                submit_next()
            while pending:
                start, stop, future = pending.popleft()
                batch, too_long = future.result()
                submit_next()
                yield start, stop - start, batch, too_long
        finally:
            executor.shutdown(wait=True, cancel_futures=True)

    def _encode_rows(self, table: pa.Table, apply_policy: bool) -> tuple[pa.RecordBatch, np.ndarray]:
        """The encoded batch of `table`'s pairs (long pairs truncated, or dropped under "skip" when `apply_policy`)
        and the indices, within `table`, of the pairs longer than the limits."""
        pairs = table.column("translation")
        sources = pc.struct_field(pairs, [self.source_lang]).to_pylist()
        targets = pc.struct_field(pairs, [self.target_lang]).to_pylist()
        sides = [self._encode(sources, target=False), self._encode(targets, target=True)]
        too_long = np.flatnonzero((sides[0][0] > self.limits[0]) | (sides[1][0] > self.limits[1]))
        if too_long.size:
            if apply_policy and self.policy == "skip":
                keep = np.ones(len(sources), dtype=bool)
                keep[too_long] = False
                sides = [(lengths[keep], values[np.repeat(keep, lengths)]) for lengths, values in sides]
            else:
                sides = [_truncate(lengths, values, limit) for (lengths, values), limit in zip(sides, self.limits)]
        batch = pa.RecordBatch.from_arrays([self._list_array(*side) for side in sides], schema=self.schema)
        return batch, too_long

    def _list_array(self, lengths: np.ndarray, values: np.ndarray) -> pa.ListArray:
        offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        values = values.astype(self.dtype, copy=False)
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=self.value_type))


def _truncate(lengths: np.ndarray, values: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row longer than `limit` cut to its first `limit - 1` ids and its last (the EOS, as the model sees at
    inference): `ids[: limit - 1] + ids[-1:]`, for all rows at once."""
    long_rows = lengths > limit
    if not long_rows.any():
        return lengths, values
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    position = np.arange(len(values)) - starts
    row_length = np.repeat(lengths, lengths)
    keep = ~np.repeat(long_rows, lengths) | (position < limit - 1) | (position == row_length - 1)
    return np.where(long_rows, limit, lengths), values[keep]


# Worker processes are forked (they inherit the tokenizer, its warm word cache and the mapped split without pickling);
# elsewhere (macOS, Windows) forking a process with threads is unsafe, and tokenising stays in one process.
_CAN_FORK = sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()
_WORKER: tuple[_SplitBuilder, Dataset] | None = None  # in a worker process: what `_worker_encode` encodes with


def _worker_init(builder: _SplitBuilder, arrow: Dataset, parent: int) -> None:
    global _WORKER
    # A worker waits on a queue whose pipe it holds both ends of, so it would outlive a parent killed by SIGKILL
    # (or the OOM killer) forever: ask the kernel to kill it with its parent.
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # each worker is one thread; the workers are the parallelism
    _WORKER = (builder, arrow)


def _worker_encode(start: int, stop: int, apply_policy: bool) -> tuple[pa.RecordBatch, np.ndarray]:
    builder, arrow = _WORKER
    return builder._encode_rows(arrow[start:stop], apply_policy)


@contextlib.contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            del os.environ[name]
        else:
            os.environ[name] = previous
