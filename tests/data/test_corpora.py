"""Tests for training/data/corpora.py: every source gives the same `translation` column, bad data fails loudly."""

from __future__ import annotations

import gzip
import json
import logging
import re
from pathlib import Path

import datasets
import pytest
from datasets import Dataset, DatasetDict, Translation

from hf_vaswani_training.data.arguments import DataArguments
from hf_vaswani_training.data.corpora import ParallelDataError, SplitStats, load_parallel_data
from tests.conftest import MULTI30K_DIR, make_hub_folder

DE = ["Ein Hund läuft.", "Zwei Männer, 3 Äpfel!", "Guten Morgen"]
EN = ["A dog runs.", "Two men, 3 apples!", "Good morning"]


def write_lines(path: Path, lines: list[str], *, gz: bool = False, newline: str = "\n") -> Path:
    data = "".join(line + newline for line in lines).encode("utf-8")
    if gz:
        path = path.with_name(path.name + ".gz")
        with gzip.open(path, "wb") as handle:
            handle.write(data)
    else:
        path.write_bytes(data)
    return path


def pairs(dataset: Dataset, src: str = "de", tgt: str = "en") -> list[tuple[str, str]]:
    return [(row[src], row[tgt]) for row in dataset["translation"]]


# ----------------------------------------------------------------------------------------------------------
# Local files: formats
# ----------------------------------------------------------------------------------------------------------


def test_text_pair_prefix_with_gzip_and_crlf(tmp_path: Path) -> None:
    write_lines(tmp_path / "train.de", DE, gz=True)
    write_lines(tmp_path / "train.en", EN, newline="\r\n")
    dataset_dict, stats = load_parallel_data(
        DataArguments(source_lang="de", target_lang="en", train_file=tmp_path / "train")
    )

    assert list(dataset_dict) == ["train"]
    assert dataset_dict["train"].column_names == ["translation"]
    assert isinstance(dataset_dict["train"].features["translation"], Translation)
    assert pairs(dataset_dict["train"]) == list(zip(DE, EN, strict=True))
    assert stats["train"] == SplitStats("train", (str(tmp_path / "train.de.gz"), str(tmp_path / "train.en")), 3, 0)


def test_naming_one_file_of_the_pair_names_the_pair(tmp_path: Path) -> None:
    write_lines(tmp_path / "dev.de", DE)
    write_lines(tmp_path / "dev.en", EN)
    dataset_dict = load_parallel_data(
        DataArguments(source_lang="de", target_lang="en", validation_file=str(tmp_path / "dev.de"))
    ).splits
    assert pairs(dataset_dict["validation"]) == list(zip(DE, EN, strict=True))


def test_language_direction_follows_arguments(tmp_path: Path) -> None:
    write_lines(tmp_path / "train.de", DE)
    write_lines(tmp_path / "train.en", EN)
    dataset_dict = load_parallel_data(
        DataArguments(source_lang="en", target_lang="de", train_file=tmp_path / "train")
    ).splits
    assert pairs(dataset_dict["train"], "en", "de") == list(zip(EN, DE, strict=True))


def test_jsonl_with_bom_and_extra_keys(tmp_path: Path) -> None:
    lines = [
        json.dumps({"translation": {"de": d, "en": e, "fr": "x"}, "id": i})
        for i, (d, e) in enumerate(zip(DE, EN, strict=True))
    ]
    path = tmp_path / "train.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode("utf-8"))  # BOM, no final newline
    dataset_dict = load_parallel_data(DataArguments(source_lang="de", target_lang="en", train_file=path)).splits
    assert pairs(dataset_dict["train"]) == list(zip(DE, EN, strict=True))


def test_tsv_without_header_is_source_then_target(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "train.tsv", [f"{d}\t{e}" for d, e in zip(DE, EN, strict=True)], gz=True)
    dataset_dict = load_parallel_data(DataArguments(source_lang="de", target_lang="en", train_file=path)).splits
    assert pairs(dataset_dict["train"]) == list(zip(DE, EN, strict=True))


def test_tsv_language_header_sets_column_order(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "train.tsv", ["en\tde"] + [f"{e}\t{d}" for d, e in zip(DE, EN, strict=True)])
    dataset_dict, stats = load_parallel_data(DataArguments(source_lang="de", target_lang="en", train_file=path))
    assert pairs(dataset_dict["train"]) == list(zip(DE, EN, strict=True))
    assert stats["train"].num_pairs == 3  # the header is not a pair


def test_data_dir_finds_splits_by_conventional_names(tmp_path: Path) -> None:
    write_lines(tmp_path / "train.de", DE, gz=True)
    write_lines(tmp_path / "train.en", EN, gz=True)
    write_lines(tmp_path / "valid.de", DE[:1])
    write_lines(tmp_path / "valid.en", EN[:1])
    (tmp_path / "test_2016_flickr.jsonl").write_text(
        json.dumps({"translation": {"de": DE[2], "en": EN[2]}}) + "\n", encoding="utf-8"
    )
    (tmp_path / "README").write_text("not data", encoding="utf-8")
    dataset_dict = load_parallel_data(DataArguments(source_lang="de", target_lang="en", data_dir=tmp_path)).splits
    assert {split: len(ds) for split, ds in dataset_dict.items()} == {"train": 3, "validation": 1, "test": 1}
    assert pairs(dataset_dict["test"]) == [(DE[2], EN[2])]


def test_data_dir_with_several_test_sets_asks_for_test_file(tmp_path: Path) -> None:
    for name in ("train", "test_2016_flickr", "test_2017_mscoco"):
        write_lines(tmp_path / f"{name}.de", DE)
        write_lines(tmp_path / f"{name}.en", EN)
    with pytest.raises(ValueError, match="test_2016_flickr, test_2017_mscoco"):
        load_parallel_data(DataArguments(source_lang="de", target_lang="en", data_dir=tmp_path))
    # A split file given with data_dir is relative to it.
    dataset_dict, stats = load_parallel_data(
        DataArguments(source_lang="de", target_lang="en", data_dir=tmp_path, test_file="test_2017_mscoco")
    )
    assert stats["test"].sources == (
        str(tmp_path / "test_2017_mscoco.de"),
        str(tmp_path / "test_2017_mscoco.en"),
    )
    assert sorted(dataset_dict) == ["test", "train"]


@pytest.mark.skipif(not MULTI30K_DIR.is_dir(), reason=f"Multi30K not found at {MULTI30K_DIR}")
def test_multi30k_folder() -> None:
    dataset_dict, stats = load_parallel_data(DataArguments(source_lang="de", target_lang="en", data_dir=MULTI30K_DIR))
    assert {split: s.num_pairs + s.num_skipped_empty for split, s in stats.items()} == {
        "train": 29000,
        "validation": 1014,
        "test": 1000,
    }
    assert stats["test"].sources[0].endswith("test_2016_flickr.de.gz")
    with gzip.open(MULTI30K_DIR / "val.de.gz", "rt", encoding="utf-8") as handle:
        first_de = handle.readline().strip()
    with gzip.open(MULTI30K_DIR / "val.en.gz", "rt", encoding="utf-8") as handle:
        first_en = handle.readline().strip()
    assert dataset_dict["validation"][0]["translation"] == {"de": first_de, "en": first_en}


# ----------------------------------------------------------------------------------------------------------
# Local files: validation
# ----------------------------------------------------------------------------------------------------------


def test_line_count_mismatch_names_both_files_and_counts(tmp_path: Path) -> None:
    src = write_lines(tmp_path / "train.de", DE)
    tgt = write_lines(tmp_path / "train.en", EN[:2], gz=True)
    with pytest.raises(ValueError, match="not line-aligned") as info:
        load_parallel_data(DataArguments(source_lang="de", target_lang="en", train_file=tmp_path / "train"))
    message = str(info.value)
    assert f"{src} has 3 lines" in message
    assert f"{tgt} has 2 lines" in message


def test_blank_pairs_are_skipped_counted_and_warned(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_lines(tmp_path / "train.de", ["Hallo", "   ", "Welt", "Tschüss", ""])
    write_lines(tmp_path / "train.en", ["Hello", "Hi", "\t", "Bye", ""])
    with caplog.at_level(logging.WARNING, logger="hf_vaswani_training.data.corpora"):
        dataset_dict, stats = load_parallel_data(
            DataArguments(source_lang="de", target_lang="en", train_file=tmp_path / "train")
        )
    assert pairs(dataset_dict["train"]) == [("Hallo", "Hello"), ("Tschüss", "Bye")]
    assert stats["train"].num_pairs == 2
    assert stats["train"].num_skipped_empty == 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert str(tmp_path / "train.de") in warnings[0]
    assert "skipped 3 pairs" in warnings[0]


def test_blank_sides_in_jsonl_and_tsv_are_skipped(tmp_path: Path) -> None:
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text(
        "\n".join(json.dumps({"translation": {"de": d, "en": e}}) for d, e in [("a", "b"), (" ", "c"), ("d", "")])
        + "\n\n",
        encoding="utf-8",
    )
    tsv = write_lines(tmp_path / "a.tsv", ["a\tb", " \tc", "", "d\te"])
    _, jsonl_stats = load_parallel_data(DataArguments(source_lang="de", target_lang="en", train_file=jsonl))
    _, tsv_stats = load_parallel_data(DataArguments(source_lang="de", target_lang="en", train_file=tsv))
    assert (jsonl_stats["train"].num_pairs, jsonl_stats["train"].num_skipped_empty) == (1, 3)
    assert (tsv_stats["train"].num_pairs, tsv_stats["train"].num_skipped_empty) == (2, 2)


@pytest.mark.parametrize("gz", [False, True])
def test_invalid_utf8_names_file_and_line(tmp_path: Path, gz: bool) -> None:
    data = b"Hallo\nWelt\ncaf\xe9 au lait\n"
    path = tmp_path / ("train.de.gz" if gz else "train.de")
    if gz:
        with gzip.open(path, "wb") as handle:
            handle.write(data)
    else:
        path.write_bytes(data)
    write_lines(tmp_path / "train.en", ["Hello", "World", "coffee"])
    with pytest.raises(ParallelDataError, match=rf"{re.escape(str(path))}:3: invalid UTF-8 \(byte 0xe9 at column 4\)"):
        load_parallel_data(DataArguments(source_lang="de", target_lang="en", train_file=tmp_path / "train"))


def test_invalid_json_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"translation": {"de": "a", "en": "b"}}) + '\n{"translation": {"de": \n', "utf-8")
    with pytest.raises(ParallelDataError, match=rf"{re.escape(str(path))}:2: not valid JSON"):
        load_parallel_data(DataArguments(source_lang="de", target_lang="en", train_file=path))


def test_json_missing_language_names_file_line_and_key(tmp_path: Path) -> None:
    path = tmp_path / "train.json"
    path.write_text(
        json.dumps({"translation": {"de": "a", "en": "b"}})
        + "\n"
        + json.dumps({"translation": {"de": "c", "fr": "d"}})
        + "\n",
        encoding="utf-8",
    )
    with pytest.raises(
        ParallelDataError,
        match=rf"{re.escape(str(path))}:2: 'translation' has no key 'en' \(keys: \['de', 'fr'\]\)",
    ):
        load_parallel_data(DataArguments(source_lang="de", target_lang="en", train_file=path))


def test_json_without_translation_object_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"de": "a", "en": "b"}) + "\n", encoding="utf-8")
    with pytest.raises(
        ParallelDataError, match=rf"{re.escape(str(path))}:1: expected an object with key 'translation'"
    ):
        load_parallel_data(DataArguments(source_lang="de", target_lang="en", train_file=path))


@pytest.mark.parametrize("bad_line", ["only one field", "a\tb\tc"])
def test_tsv_wrong_field_count_names_file_and_line(tmp_path: Path, bad_line: str) -> None:
    path = write_lines(tmp_path / "train.tsv", ["a\tb", "c\td", bad_line])
    found = len(bad_line.split("\t"))
    with pytest.raises(
        ParallelDataError,
        match=rf"{re.escape(str(path))}:3: expected 2 tab-separated fields .* found {found}",
    ):
        load_parallel_data(DataArguments(source_lang="de", target_lang="en", train_file=path))


def test_missing_files_raise_file_not_found_with_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "nope.jsonl"))):
        load_parallel_data(DataArguments(source_lang="de", target_lang="en", train_file=tmp_path / "nope.jsonl"))
    write_lines(tmp_path / "train.de", DE)  # the target half is missing
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "train.en"))):
        load_parallel_data(DataArguments(source_lang="de", target_lang="en", train_file=tmp_path / "train"))
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "missing_dir"))):
        load_parallel_data(DataArguments(source_lang="de", target_lang="en", data_dir=tmp_path / "missing_dir"))
    # A folder holding one half of a pair is an error, not a missing split.
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "train.en"))):
        load_parallel_data(DataArguments(source_lang="de", target_lang="en", data_dir=tmp_path))


def test_conflicting_or_missing_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot be combined"):
        load_parallel_data(
            DataArguments(source_lang="de", target_lang="en", dataset_name="wmt14", train_file=tmp_path / "train")
        )
    with pytest.raises(ValueError, match="both languages are required"):
        load_parallel_data(DataArguments(train_file=tmp_path / "train"))
    with pytest.raises(ValueError, match="give both or neither"):
        load_parallel_data(DataArguments(source_lang="de", target_lang="en", dataset_name="wmt14", source_column="src"))


# ----------------------------------------------------------------------------------------------------------
# Hub datasets, exercised through a local folder in the Hub's layout
# ----------------------------------------------------------------------------------------------------------


@pytest.fixture
def load_dataset_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """Record the calls to `datasets.load_dataset`, so a test can show the Hub code path ran."""
    calls: list[tuple] = []
    real = datasets.load_dataset

    def spy(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", spy)
    return calls


def test_hub_translation_format(tmp_path: Path, load_dataset_calls: list[tuple]) -> None:
    translations = [{"de": d, "en": e, "fr": "f"} for d, e in zip(DE, EN, strict=True)]
    folder = make_hub_folder(
        tmp_path / "wmt_like",
        {
            "train": {"translation": translations, "id": [0, 1, 2]},
            "dev": {"translation": translations[:1], "id": [0]},
            "extra": {"translation": translations[:1], "id": [0]},
        },
    )
    dataset_dict = load_parallel_data(
        DataArguments(source_lang="de", target_lang="en", dataset_name=str(folder), dataset_config_name="de-en"),
        cache_dir=tmp_path / "cache",
    ).splits
    assert load_dataset_calls == [(str(folder), "de-en")]
    assert sorted(dataset_dict) == ["train", "validation"]  # "dev" renamed, "extra" dropped
    assert dataset_dict["train"].column_names == ["translation"]
    assert dataset_dict["train"].features["translation"] == Translation(languages=["de", "en"])
    assert pairs(dataset_dict["train"]) == list(zip(DE, EN, strict=True))


def test_hub_translation_format_missing_language(tmp_path: Path) -> None:
    folder = make_hub_folder(tmp_path / "hub", {"train": {"translation": [{"de": "a", "fr": "b"}]}})
    with pytest.raises(ParallelDataError, match=r"\[train\]: column 'translation' has no language 'en'"):
        load_parallel_data(
            DataArguments(source_lang="de", target_lang="en", dataset_name=str(folder), dataset_config_name="de-en"),
            cache_dir=tmp_path,
        )


def test_hub_two_language_columns_and_blank_filter(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = make_hub_folder(
        tmp_path / "hub", {"train": {"de": DE + ["  "], "en": EN + ["x"]}, "test": {"de": DE, "en": EN}}
    )
    with caplog.at_level(logging.WARNING, logger="hf_vaswani_training.data.corpora"):
        dataset_dict, stats = load_parallel_data(
            DataArguments(source_lang="de", target_lang="en", dataset_name=str(folder), dataset_config_name="de-en"),
            cache_dir=tmp_path / "c",
        )
    assert pairs(dataset_dict["train"]) == list(zip(DE, EN, strict=True))
    assert pairs(dataset_dict["test"]) == list(zip(DE, EN, strict=True))
    assert (stats["train"].num_pairs, stats["train"].num_skipped_empty) == (3, 1)
    assert any("skipped 1 pairs" in r.getMessage() for r in caplog.records)


def test_hub_explicit_columns(tmp_path: Path) -> None:
    folder = make_hub_folder(tmp_path / "hub", {"train": {"src": DE, "tgt": EN, "score": [1.0, 2.0, 3.0]}})
    dataset_dict = load_parallel_data(
        DataArguments(
            source_lang="de",
            target_lang="en",
            dataset_name=str(folder),
            dataset_config_name="de-en",
            source_column="src",
            target_column="tgt",
        ),
        cache_dir=tmp_path / "c",
    ).splits
    assert dataset_dict["train"].column_names == ["translation"]
    assert pairs(dataset_dict["train"]) == list(zip(DE, EN, strict=True))
    with pytest.raises(ParallelDataError, match="no source column 'de'"):
        load_parallel_data(
            DataArguments(source_lang="de", target_lang="en", dataset_name=str(folder), dataset_config_name="de-en"),
            cache_dir=tmp_path,
        )


# ----------------------------------------------------------------------------------------------------------
# The toy corpus default
# ----------------------------------------------------------------------------------------------------------


def test_toy_corpus_is_the_default() -> None:
    toy = pytest.importorskip("hf_vaswani_training.data.toy_corpus")
    dataset_dict, stats = load_parallel_data(DataArguments(toy_num_train=20, toy_num_validation=5, toy_num_test=5))
    assert isinstance(dataset_dict, DatasetDict)
    assert len(dataset_dict["train"]) == 20
    assert stats["train"].num_pairs == 20
    row = dataset_dict["train"][0]["translation"]
    assert set(row) == {toy.SOURCE_LANG, toy.TARGET_LANG}
    with pytest.raises(ValueError, match="toy corpus"):
        load_parallel_data(DataArguments(source_lang="de", target_lang="en"))
