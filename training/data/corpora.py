"""Parallel corpora as a `datasets.DatasetDict` with one column, `{"translation": {src: str, tgt: str}}`.

One entry point, `load_parallel_data`, reads from one of three sources:

1. A dataset on the Hugging Face Hub (or a local folder laid out like one), through
   `datasets.load_dataset(dataset_name, dataset_config_name)`. Either it already has the WMT-style
   `translation` column, or it has two text columns (named by the languages, or named with
   `source_column` / `target_column`) that are converted.
2. Local files, one per split (`train_file`, `validation_file`, `test_file`) or found in `data_dir`.
   The format follows the extension (an optional trailing `.gz` is decompressed):

   * `.jsonl` / `.json`: JSON lines, `{"translation": {"de": "...", "en": "..."}}` per line.
   * `.tsv`: two tab-separated fields per line, source then target. The first line is a header if and
     only if its two fields are exactly the two language codes (`de<TAB>en` or `en<TAB>de`); the header
     then says which column holds which language. Fields are taken literally (no CSV quoting).
   * anything else: a *prefix* of a line-aligned pair of plain-text files, `PREFIX.SRC` and `PREFIX.TGT`
     (each optionally `.gz`), as fairseq, OpenNMT and Multi30K ship them. Giving one of the two files
     (`data/train.de`) names the same pair as its prefix (`data/train`).

   `data_dir` finds the splits by name: `train`, then `validation` / `valid` / `val` / `dev`, then `test`
   or the only `test*` set (Multi30K's `test_2016_flickr`); a split file given together with `data_dir`
   is read relative to it, which is how one of several test sets is chosen.
3. Nothing named: the embedded toy corpus from `training/data/toy_corpus.py` (imported lazily).

The local readers are plain Python on purpose: reading line by line with strict UTF-8 lets every error name
the file and the 1-based line, and corrupt data stops the run at load time, before any training step. Control
characters other than the tab (a NUL, DEL, C1) are refused the same way (textfiles.CONTROL_CHARACTERS). They
stream: pairs go to an Arrow file one record batch at a time (memory bounded by a batch, not the corpus), and
the split is returned memory-mapped from it. The file is cached under `cache_dir` (default
`$HF_DATASETS_CACHE/hf_vaswani/text`), keyed by the files' content hash (their path, size, mtime and inode above
256 MiB), so a second run on unchanged files reads no text. A cached split that does not open with its recorded
number of pairs (an empty or cut file, left by a crash) is named in a warning and read again.
Blank sentences: a pair whose source or target is empty or whitespace-only is dropped (it would train the
model to map something to nothing); the count is logged as a warning and returned in `SplitStats`.
Leading and trailing whitespace of a line in a local file is removed (line terminators, `\\r` of
Windows files and stray spaces are artefacts of the one-sentence-per-line format); inner whitespace is kept.
Hub datasets are fields, not lines, and are kept verbatim apart from dropping blank pairs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

import datasets
import pyarrow as pa
from datasets import Dataset, DatasetDict, Features, Translation

from ..staging import staged_folder
from .arguments import DataArguments
from .textfiles import (
    DataFileNotFoundError,
    ParallelDataError,
    pair_half,
    read_jsonl_pairs,
    read_text_pair,
    read_tsv_pairs,
)

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]

SPLITS = ("train", "validation", "test")
# Names under which corpora ship their validation split (fairseq: valid, Multi30K: val, WMT: dev).
_SPLIT_ALIASES = {
    "train": ("train",),
    "validation": ("validation", "valid", "val", "dev"),
    "test": ("test",),
}
_JSON_SUFFIXES = (".jsonl", ".json")
_TSV_SUFFIXES = (".tsv",)


@dataclass(frozen=True)
class SplitStats:
    """What was read for one split: where from, how many pairs were kept and how many blank pairs dropped."""

    split: str
    sources: tuple[str, ...]
    num_pairs: int
    num_skipped_empty: int


# ----------------------------------------------------------------------------------------------------------
# Public entry point
# ----------------------------------------------------------------------------------------------------------


class ParallelData(NamedTuple):
    """What `load_parallel_data` read: the splits, and per split where from and how many pairs (`SplitStats`)."""

    splits: DatasetDict
    stats: dict[str, SplitStats]


def load_parallel_data(
    data_args: DataArguments | None = None, *, seed: int = 0, cache_dir: PathLike | None = None
) -> ParallelData:
    """Load a parallel corpus as a DatasetDict with splits among train/validation/test.

    Every split has exactly one column, `"translation"`, of `{source_lang: str, target_lang: str}` dicts
    (feature type `datasets.Translation`), whatever the source. See the module docstring for the sources
    and formats.

    Args:
        data_args: what to read (the `DataArguments` of vaswani-train; `None` reads the toy corpus at the sizes of
            `DataArguments()`). The fields used:
            source_lang, target_lang: language codes (`"de"`, `"en"`): keys of the translation dicts and
                suffixes of plain-text files. Required except for the toy corpus, whose own codes are the default.
            dataset_name, dataset_config_name: a Hub dataset (`"wmt14"`, `"de-en"`) or a local folder in the
                Hub layout, loaded with `datasets.load_dataset`.
            source_column, target_column: for a Hub dataset with two text columns not named by the languages.
            data_dir: a folder with `train.*`, `val.*`/`valid.*`/`validation.*`/`dev.*` and `test*` files.
            train_file, validation_file, test_file: a `.jsonl`/`.json`/`.tsv` file (optionally `.gz`) or the
                prefix of a plain-text pair; relative to `data_dir` when that is given.
            toy_num_train, toy_num_validation, toy_num_test: sizes of the toy corpus.
        seed: the toy corpus's seed.
        cache_dir: the `datasets` cache for the Hub path; for local files, where their Arrow copies are cached
            (default `$HF_DATASETS_CACHE/hf_vaswani`).

    Raises:
        DataFileNotFoundError (a FileNotFoundError and a ParallelDataError): a named file, pair half or folder
            does not exist.
        ParallelDataError (a UsageError, so a ValueError): conflicting or missing arguments, an empty split, or
            malformed data; the message names the file, the 1-based line and what is wrong (misaligned pair files
            name both files and both line counts).
    """
    if data_args is None:
        data_args = DataArguments()
    source_lang, target_lang = data_args.source_lang, data_args.target_lang
    dataset_name, dataset_config_name = data_args.dataset_name, data_args.dataset_config_name
    source_column, target_column, data_dir = data_args.source_column, data_args.target_column, data_args.data_dir
    split_files = {"train": data_args.train_file, "validation": data_args.validation_file, "test": data_args.test_file}
    uses_files = data_dir is not None or any(f is not None for f in split_files.values())
    if dataset_name is not None and uses_files:
        raise ParallelDataError(
            f"dataset_name={dataset_name!r} cannot be combined with data_dir/train_file/validation_file/"
            "test_file: name either a (Hub) dataset or local files"
        )
    if (source_column is None) != (target_column is None):
        raise ParallelDataError(
            f"source_column={source_column!r} and target_column={target_column!r}: give both or neither"
        )

    if dataset_name is not None:
        src, tgt = _require_langs(source_lang, target_lang, "dataset_name")
        dataset_dict, stats = load_hub_dataset(
            dataset_name, dataset_config_name, src, tgt, source_column, target_column, cache_dir
        )
    elif uses_files:
        src, tgt = _require_langs(source_lang, target_lang, "local files")
        dataset_dict, stats = _load_local_files(data_dir, split_files, src, tgt, cache_dir)
    else:
        dataset_dict, stats = _load_toy_corpus(
            source_lang,
            target_lang,
            data_args.toy_num_train,
            data_args.toy_num_validation,
            data_args.toy_num_test,
            seed,
        )

    for split_stats in stats.values():
        logger.info(
            "%s split: %d pairs from %s",
            split_stats.split,
            split_stats.num_pairs,
            ", ".join(split_stats.sources),
        )
    return ParallelData(dataset_dict, stats)


def _require_langs(source_lang: str | None, target_lang: str | None, what: str) -> tuple[str, str]:
    if not source_lang or not target_lang:
        raise ParallelDataError(
            f"source_lang={source_lang!r} and target_lang={target_lang!r}: both languages are required "
            f"when loading from {what}"
        )
    if source_lang == target_lang:
        raise ParallelDataError(f"source_lang and target_lang are both {source_lang!r}; they must differ")
    return source_lang, target_lang


def _translation_features(source_lang: str, target_lang: str) -> Features:
    return Features({"translation": Translation(languages=[source_lang, target_lang])})


# ----------------------------------------------------------------------------------------------------------
# Source 1: a Hub dataset (or a local folder in the Hub layout)
# ----------------------------------------------------------------------------------------------------------


def load_hub_dataset(
    dataset_name: str,
    dataset_config_name: str | None,
    source_lang: str,
    target_lang: str,
    source_column: str | None,
    target_column: str | None,
    cache_dir: PathLike | None,
) -> tuple[DatasetDict, dict[str, SplitStats]]:
    cache = None if cache_dir is None else str(cache_dir)
    try:
        loaded = datasets.load_dataset(dataset_name, dataset_config_name, cache_dir=cache)
    except (FileNotFoundError, ConnectionError) as error:
        # No such repository (or folder), no data files in it, or the Hub unreachable and nothing cached:
        # `datasets` says which in its first line.
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ParallelDataError(f"--dataset_name {dataset_name}: {message}") from error
    except ValueError as error:
        # `datasets` reports a missing or unknown configuration as a bare ValueError with a multi-line usage
        # example; say it in one line with the configurations the dataset has.
        problem = _config_problem(dataset_name, dataset_config_name, cache_dir)
        if problem is None:
            raise
        raise ParallelDataError(problem) from error
    if not isinstance(loaded, DatasetDict):
        raise ParallelDataError(f"dataset {dataset_name!r} did not load as a DatasetDict (got {type(loaded).__name__})")
    where = dataset_name if dataset_config_name is None else f"{dataset_name} ({dataset_config_name})"

    result: dict[str, Dataset] = {}
    stats: dict[str, SplitStats] = {}
    for hub_split, dataset in loaded.items():
        split = _canonical_split(hub_split)
        if split is None:
            logger.info("%s: ignoring split %r (not train, validation or test)", where, hub_split)
            continue
        if split in result:
            earlier = stats[split].sources[0]
            raise ParallelDataError(f"{where}: splits {earlier} and {hub_split!r} are both the {split} split")
        converted = _to_translation_column(
            dataset, f"{where}[{hub_split}]", source_lang, target_lang, source_column, target_column
        )
        # Blank sentences are dropped here as for local files, so every source obeys the same contract.
        kept = converted.filter(
            _nonblank_batch,
            batched=True,
            fn_kwargs={"source_lang": source_lang, "target_lang": target_lang},
            desc=f"dropping blank pairs in {split}",
        )
        skipped = len(converted) - len(kept)
        if skipped:
            logger.warning("%s[%s]: skipped %d pairs with an empty or whitespace-only side", where, hub_split, skipped)
        result[split] = kept
        stats[split] = SplitStats(split, (f"{where}[{hub_split}]",), len(kept), skipped)
    if not result:
        raise ParallelDataError(f"{where}: no train, validation or test split (found {sorted(loaded)})")
    return DatasetDict(result), stats


def _config_problem(dataset_name: str, dataset_config_name: str | None, cache_dir: PathLike | None) -> str | None:
    """What is wrong with `dataset_config_name` for `dataset_name`, or None when the configuration is not the
    problem (or the configurations cannot be listed)."""
    if datasets.config.HF_HUB_OFFLINE and not Path(dataset_name).exists():
        # Offline, `datasets` knows only the configurations in its cache (and lists a Hub dataset's as "default").
        root = Path(cache_dir or datasets.config.HF_DATASETS_CACHE) / dataset_name.replace("/", "___")
        cached = sorted(path.name for path in root.iterdir() if path.is_dir()) if root.is_dir() else []
        if dataset_config_name in cached or (dataset_config_name is None and len(cached) == 1):
            return None
        return (
            f"--dataset_name {dataset_name} --dataset_config_name {dataset_config_name}: not in the local cache, "
            f"and HF_HUB_OFFLINE is set so the Hub is not asked (cached configurations: {', '.join(cached) or 'none'});"
            " run once where the Hub is reachable"
        )
    try:
        names = list(datasets.get_dataset_config_names(dataset_name))
    except Exception:  # noqa: BLE001  the original error is the one to report then
        return None
    available = ", ".join(names)
    if dataset_config_name is None and len(names) > 1:
        return (
            f"--dataset_name {dataset_name}: the dataset has {len(names)} configurations ({available}); "
            "choose one with --dataset_config_name"
        )
    if dataset_config_name is not None and dataset_config_name not in names:
        return (
            f"--dataset_config_name {dataset_config_name}: {dataset_name} has no such configuration; "
            f"its configurations are {available}"
        )
    return None


def _canonical_split(name: str) -> str | None:
    for split, aliases in _SPLIT_ALIASES.items():
        if name in aliases:
            return split
    return None


def _nonblank_batch(batch: dict[str, list[Any]], source_lang: str, target_lang: str) -> list[bool]:
    return [
        bool(pair[source_lang] and pair[source_lang].strip() and pair[target_lang] and pair[target_lang].strip())
        for pair in batch["translation"]
    ]


def _to_translation_column(
    dataset: Dataset,
    where: str,
    source_lang: str,
    target_lang: str,
    source_column: str | None,
    target_column: str | None,
) -> Dataset:
    """Bring a Hub split to the single `translation` column, from the WMT format or from two text columns."""
    columns = dataset.column_names
    if source_column is None and "translation" in columns:
        feature = dataset.features["translation"]
        if isinstance(feature, Translation):
            languages = list(feature.languages)
        elif isinstance(feature, dict):
            languages = list(feature)
        else:
            raise ParallelDataError(
                f"{where}: column 'translation' has feature {feature!r}; expected a Translation or a dict of "
                "language -> text"
            )
        missing = [lang for lang in (source_lang, target_lang) if lang not in languages]
        if missing:
            raise ParallelDataError(
                f"{where}: column 'translation' has no language {missing[0]!r} (languages: {languages})"
            )
        if sorted(languages) == sorted([source_lang, target_lang]) and columns == ["translation"]:
            if isinstance(feature, Translation):
                return dataset
            return dataset.cast(_translation_features(source_lang, target_lang))
        # Extra columns or languages: keep only this pair.
        return dataset.map(
            _project_translation,
            batched=True,
            remove_columns=columns,
            features=_translation_features(source_lang, target_lang),
            fn_kwargs={"source_lang": source_lang, "target_lang": target_lang},
            desc=f"selecting {source_lang}-{target_lang}",
        )

    src_col = source_column if source_column is not None else source_lang
    tgt_col = target_column if target_column is not None else target_lang
    for role, column in (("source", src_col), ("target", tgt_col)):
        if column not in columns:
            raise ParallelDataError(
                f"{where}: no {role} column {column!r} (columns: {columns}); the dataset needs a "
                "'translation' column or two text columns, named by the languages or by "
                "source_column/target_column"
            )
    return dataset.map(
        _pair_columns,
        batched=True,
        remove_columns=columns,
        features=_translation_features(source_lang, target_lang),
        fn_kwargs={
            "source_column": src_col,
            "target_column": tgt_col,
            "source_lang": source_lang,
            "target_lang": target_lang,
        },
        desc=f"building translation column from {src_col!r}, {tgt_col!r}",
    )


def _project_translation(
    batch: dict[str, list[Any]], source_lang: str, target_lang: str
) -> dict[str, list[dict[str, str]]]:
    return {
        "translation": [
            {source_lang: pair[source_lang], target_lang: pair[target_lang]} for pair in batch["translation"]
        ]
    }


def _pair_columns(
    batch: dict[str, list[Any]], source_column: str, target_column: str, source_lang: str, target_lang: str
) -> dict[str, list[dict[str, str]]]:
    return {
        "translation": [
            {source_lang: source, target_lang: target}
            for source, target in zip(batch[source_column], batch[target_column], strict=True)
        ]
    }


# ----------------------------------------------------------------------------------------------------------
# Source 2: local files
# ----------------------------------------------------------------------------------------------------------


def _load_local_files(
    data_dir: PathLike | None,
    split_files: dict[str, PathLike | None],
    source_lang: str,
    target_lang: str,
    cache_dir: PathLike | None = None,
) -> tuple[DatasetDict, dict[str, SplitStats]]:
    base = None if data_dir is None else Path(data_dir)
    if base is not None and not base.is_dir():
        raise DataFileNotFoundError(f"data_dir {str(base)!r} does not exist or is not a folder")

    result: dict[str, Dataset] = {}
    stats: dict[str, SplitStats] = {}
    for split in SPLITS:
        named = split_files[split]
        if named is not None:
            path = Path(named)
            if base is not None and not path.is_absolute():
                path = base / path
            try:
                spec: _FileSpec | None = _resolve_spec(path, source_lang, target_lang)
            except DataFileNotFoundError:
                if path.is_dir():
                    raise ParallelDataError(
                        f"--{split}_file {named}: is a folder, give a file (.jsonl, .tsv or the prefix of a text "
                        "pair; a folder of train/valid/test files is --data_dir)"
                    ) from None
                raise
        elif base is not None:
            spec = _find_split_in_dir(base, split, source_lang, target_lang)
        else:
            spec = None
        if spec is None:
            continue
        dataset, num_pairs, skipped = _read_split_to_arrow(spec, split, source_lang, target_lang, cache_dir)
        sources = tuple(str(p) for p in spec.paths)
        if not num_pairs:
            # Checked here, before any tokenizer is trained on (and saved from) an empty corpus.
            raise ParallelDataError(
                f"{' + '.join(sources)}: no sentence pairs for the {split} split ({skipped} blank pairs skipped); "
                "give files with at least one line of text on both sides"
            )
        if skipped:
            logger.warning("%s: skipped %d pairs with an empty or whitespace-only side", " + ".join(sources), skipped)
        result[split] = dataset
        stats[split] = SplitStats(split, sources, num_pairs, skipped)

    if not result:
        raise DataFileNotFoundError(
            f"no train, validation or test files for {source_lang}-{target_lang} in data_dir {str(base)!r} "
            f"(expected e.g. train.{source_lang}[.gz] + train.{target_lang}[.gz], train.jsonl or train.tsv)"
        )
    return DatasetDict(result), stats


@dataclass(frozen=True)
class _FileSpec:
    """One split's file(s) and their format."""

    kind: Literal["jsonl", "tsv", "pair"]
    paths: tuple[Path, ...]

    def pairs(self, source_lang: str, target_lang: str) -> Iterator[tuple[str, str]]:
        """Stripped (source, target) per line, blank ones included (the caller counts and drops them)."""
        if self.kind == "jsonl":
            return read_jsonl_pairs(self.paths[0], source_lang, target_lang)
        if self.kind == "tsv":
            return read_tsv_pairs(self.paths[0], source_lang, target_lang)
        return read_text_pair(self.paths[0], self.paths[1])


def _format_suffix(path: Path) -> str:
    """The format-bearing suffix, looking through a trailing `.gz`."""
    name = path.name.removesuffix(".gz")
    return Path(name).suffix.lower()


def _resolve_spec(path: Path, source_lang: str, target_lang: str) -> _FileSpec:
    """Interpret a user-given split file: a JSON lines or TSV file, else a text-pair prefix."""
    suffix = _format_suffix(path)
    if suffix in _JSON_SUFFIXES or suffix in _TSV_SUFFIXES:
        if not path.is_file():
            raise DataFileNotFoundError(f"data file {str(path)!r} does not exist")
        return _FileSpec("jsonl" if suffix in _JSON_SUFFIXES else "tsv", (path,))

    prefix = path
    # `data/train.de(.gz)` names the same pair as `data/train`.
    for lang in (source_lang, target_lang):
        for ending in (f".{lang}", f".{lang}.gz"):
            if path.name.endswith(ending) and len(path.name) > len(ending):
                prefix = path.with_name(path.name[: -len(ending)])
    return _FileSpec("pair", (pair_half(prefix, source_lang), pair_half(prefix, target_lang)))


def _find_split_in_dir(base: Path, split: str, source_lang: str, target_lang: str) -> _FileSpec | None:
    """Find a split by its conventional names in `data_dir`; None when the folder has no such split."""
    for name in _SPLIT_ALIASES[split]:
        found = _spec_for_name(base, name, source_lang, target_lang)
        if found is not None:
            return found
    if split != "test":
        return None

    # Test sets are often named after their year and domain (Multi30K's test_2016_flickr); take the only one.
    candidates = sorted(
        {
            name
            for path in base.iterdir()
            if path.is_file() and path.name.startswith("test")
            for name in [_split_name_of(path.name, source_lang, target_lang)]
            if name is not None
        }
    )
    if len(candidates) > 1:
        raise ParallelDataError(
            f"data_dir {str(base)!r} has several test sets ({', '.join(candidates)}); choose one with "
            f"test_file='{candidates[0]}' (relative to data_dir)"
        )
    if candidates:
        return _spec_for_name(base, candidates[0], source_lang, target_lang)
    return None


def _split_name_of(filename: str, source_lang: str, target_lang: str) -> str | None:
    """`test_2016_flickr` for `test_2016_flickr.de.gz`, `test.jsonl` etc.; None for unrelated files."""
    stem = filename.removesuffix(".gz")
    for ending in (f".{source_lang}", f".{target_lang}", *_JSON_SUFFIXES, *_TSV_SUFFIXES):
        if stem.endswith(ending):
            return stem[: -len(ending)]
    return None


def _spec_for_name(base: Path, name: str, source_lang: str, target_lang: str) -> _FileSpec | None:
    for suffix in (*_JSON_SUFFIXES, *_TSV_SUFFIXES):
        for candidate in (base / f"{name}{suffix}", base / f"{name}{suffix}.gz"):
            if candidate.is_file():
                return _FileSpec("jsonl" if suffix in _JSON_SUFFIXES else "tsv", (candidate,))
    halves = [base / f"{name}.{lang}{gz}" for lang in (source_lang, target_lang) for gz in ("", ".gz")]
    if not any(p.is_file() for p in halves):
        return None
    # One half present and the other missing is an error, not an absent split.
    return _FileSpec("pair", (pair_half(base / name, source_lang), pair_half(base / name, target_lang)))


# Pairs per Arrow record batch while reading: bounds the reader's memory (~10 MB of text at WMT's lengths).
_READ_BATCH = 50_000
# Files up to this size are identified by a hash of their content; larger ones by path, size, mtime and inode
# (hashing 10 GB of en-fr text on every start would cost more than the cache saves).
_CONTENT_HASH_LIMIT = 256 * 2**20
# Bump when the reading rules change (stripping, blank pairs, formats), so older cached splits are not reused.
_READER_VERSION = 2  # 2: control characters refused (textfiles.CONTROL_CHARACTERS)


def _file_identity(path: Path) -> list:
    stat = path.stat()
    if stat.st_size <= _CONTENT_HASH_LIMIT:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(2**20), b""):
                digest.update(block)
        return [str(path.resolve()), stat.st_size, digest.hexdigest()]
    return [str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino]


def _read_split_to_arrow(
    spec: _FileSpec, split: str, source_lang: str, target_lang: str, cache_dir: PathLike | None
) -> tuple[Dataset, int, int]:
    """Read one split into a memory-mapped Arrow file, cached by the files' identity; (dataset, kept, skipped).

    The pairs go to disk one record batch at a time, so memory stays bounded by a batch whatever the corpus
    size. A second run on unchanged files maps the file the first one wrote and reads no text. The file is
    written in a staging folder renamed into place when complete: a killed run never leaves a cache to reuse.
    """
    from .cache import default_cache_root

    features = _translation_features(source_lang, target_lang)
    identity = [_READER_VERSION, spec.kind, source_lang, target_lang, [_file_identity(p) for p in spec.paths]]
    key = hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:24]
    root = (Path(cache_dir) if cache_dir is not None else default_cache_root()) / "text"
    folder = root / f"{split}-{key}"
    if folder.exists():
        cached = _open_cached_split(folder, split)
        if cached is not None:
            logger.info("%s split: reusing %s (the files are unchanged)", split, folder)
            return cached
        shutil.rmtree(folder, ignore_errors=True)

    schema = features.arrow_schema
    struct_type = schema.field("translation").type
    kept = skipped = 0
    # Another process (rank) may write the same split first; its folder is kept once its meta.json is there.
    with staged_folder(folder, is_complete=lambda found: (found / "meta.json").is_file()) as staging:
        with pa.ipc.new_stream(str(staging / "data.arrow"), schema) as writer:
            sources: list[str] = []
            targets: list[str] = []
            for source, target in spec.pairs(source_lang, target_lang):
                if not (source and target):
                    skipped += 1
                    continue
                sources.append(source)
                targets.append(target)
                if len(sources) == _READ_BATCH:
                    writer.write_batch(_pair_batch(sources, targets, source_lang, struct_type, schema))
                    kept += len(sources)
                    sources, targets = [], []
            if sources or not kept:
                writer.write_batch(_pair_batch(sources, targets, source_lang, struct_type, schema))
                kept += len(sources)
        (staging / "meta.json").write_text(json.dumps({"pairs": kept, "skipped": skipped}) + "\n")
    return Dataset.from_file(str(folder / "data.arrow"), split=split), kept, skipped


def _open_cached_split(folder: Path, split: str) -> tuple[Dataset, int, int] | None:
    """The cached split in `folder` when it is whole: meta.json parses and data.arrow opens with the recorded number
    of pairs. Otherwise (what a crash without fsync leaves: an empty or cut file) a one-line warning and None, and the
    caller reads the text again."""
    try:
        counts = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        pairs, skipped = int(counts["pairs"]), int(counts["skipped"])
        dataset = Dataset.from_file(str(folder / "data.arrow"), split=split)
        if dataset.num_rows != pairs:
            raise ValueError(f"data.arrow has {dataset.num_rows} pairs, meta.json says {pairs}")
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as error:
        logger.warning(
            "the cached %s split %s is damaged (%s); reading the files again", split, folder, _first_line(error)
        )
        return None
    return dataset, pairs, skipped


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _pair_batch(
    sources: list[str], targets: list[str], source_lang: str, struct_type: pa.StructType, schema: pa.Schema
) -> pa.RecordBatch:
    # The struct's fields are in the Translation feature's (sorted) language order, not source-target order.
    columns = [pa.array(sources if field.name == source_lang else targets, type=pa.string()) for field in struct_type]
    struct = pa.StructArray.from_arrays(columns, fields=list(struct_type))
    return pa.RecordBatch.from_arrays([struct], schema=schema)


# ----------------------------------------------------------------------------------------------------------
# Source 3: the embedded toy corpus
# ----------------------------------------------------------------------------------------------------------


def _load_toy_corpus(
    source_lang: str | None,
    target_lang: str | None,
    num_train: int | None,
    num_validation: int | None,
    num_test: int | None,
    seed: int,
) -> tuple[DatasetDict, dict[str, SplitStats]]:
    # Imported here so that this module works (for real corpora) without the toy corpus module.
    from .toy_corpus import SOURCE_LANG, TARGET_LANG, corpus_as_dataset_dict

    for role, given, toy in (
        ("source_lang", source_lang, SOURCE_LANG),
        ("target_lang", target_lang, TARGET_LANG),
    ):
        if given is not None and given != toy:
            raise ParallelDataError(
                f"{role}={given!r} but no data was named and the toy corpus is {SOURCE_LANG}->{TARGET_LANG}; "
                "give dataset_name, data_dir or train_file for other languages"
            )
    sizes = {"num_train": num_train, "num_validation": num_validation, "num_test": num_test}
    for name, size in sizes.items():
        if size is not None and size < 1:
            raise ParallelDataError(f"--toy_{name} {size}: the toy corpus split needs at least 1 pair")
    dataset_dict = corpus_as_dataset_dict(**{k: v for k, v in sizes.items() if v is not None}, seed=seed)
    stats = {split: SplitStats(split, ("toy corpus",), len(dataset), 0) for split, dataset in dataset_dict.items()}
    return dataset_dict, stats
