"""Faults of the data path that used to pass in silence or end in a traceback (issue 21, point 4).

- control characters in training text stop the run naming the file and line, as invalid UTF-8 does;
- a training file that is a folder is named as one;
- a damaged cache (an empty or cut file: what a crash without fsync leaves) is noticed when opened, named in one
  warning and rebuilt, with the same ids as before.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from hf_vaswani_training.data.arguments import DataArguments
from hf_vaswani_training.data.cache import tokenize_to_cache
from hf_vaswani_training.data.corpora import load_parallel_data
from hf_vaswani_training.data.prepare_wmt import prepare
from hf_vaswani_training.data.textfiles import ParallelDataError
from hf_vaswani_training.data.tokenizer import load_or_train_tokenizer
from tests.conftest import TINY_RUN, assert_one_line_error, run_cli

DE = ["Ein Hund läuft .", "Zwei Männer lesen", "Guten Morgen"]
EN = ["A dog runs .", "Two men read", "Good morning"]


def _args(**kwargs) -> DataArguments:
    return DataArguments(source_lang="de", target_lang="en", **kwargs)


def _write(path: Path, lines: list[str]) -> Path:
    path.write_bytes("".join(line + "\n" for line in lines).encode("utf-8"))
    return path


# ---- control characters ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("character", "name"),
    [("\x00", "U+0000"), ("\x0c", "U+000C"), ("\r", "U+000D"), ("\x1b", "U+001B"), ("\x7f", "U+007F"),
     ("\x85", "U+0085")],
)  # fmt: skip
def test_control_characters_in_a_text_pair_name_file_and_line(tmp_path: Path, character: str, name: str) -> None:
    _write(tmp_path / "train.de", DE)
    path = _write(tmp_path / "train.en", [EN[0], f"Two{character}men read", EN[2]])
    with pytest.raises(
        ParallelDataError, match=rf"^{re.escape(str(path))}:2: control character {re.escape(name)} at column 4;"
    ):
        load_parallel_data(_args(train_file=tmp_path / "train"), cache_dir=tmp_path / "cache")


def test_control_characters_in_tsv_and_jsonl_are_refused_but_tabs_are_text(tmp_path: Path) -> None:
    tsv = _write(tmp_path / "train.tsv", ["de\ten", "Hund\tdog", "Kat\x00ze\tcat"])
    with pytest.raises(ParallelDataError, match=rf"^{re.escape(str(tsv))}:3: control character U\+0000 at column 4"):
        load_parallel_data(_args(train_file=tsv), cache_dir=tmp_path / "cache")
    # In JSON the NUL arrives as an escape, which the line's own check cannot see.
    jsonl = _write(tmp_path / "train.jsonl", [json.dumps({"translation": {"de": "Kat\x00ze", "en": "cat"}})])
    assert "\\u0000" in jsonl.read_text(encoding="utf-8")
    with pytest.raises(ParallelDataError, match=rf"^{re.escape(str(jsonl))}:1: translation\['de'\] has a control"):
        load_parallel_data(_args(train_file=jsonl), cache_dir=tmp_path / "cache")
    # A tab inside a sentence of a text pair is an ordinary character, kept.
    _write(tmp_path / "tabs.de", ["ein\tHund"])
    _write(tmp_path / "tabs.en", ["a dog"])
    splits, _ = load_parallel_data(_args(train_file=tmp_path / "tabs"), cache_dir=tmp_path / "cache")
    assert splits["train"][0]["translation"] == {"de": "ein\tHund", "en": "a dog"}


def test_prepare_wmt_turns_control_characters_into_spaces(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """WMT's crawled corpora hold some; the layout it writes must be one training reads."""
    _write(tmp_path / "crawl.de", ["Ein\x00Hund", "Katze"])
    _write(tmp_path / "crawl.en", ["A dog\x85", "cat"])
    with caplog.at_level(logging.WARNING):
        assert prepare(tmp_path / "out", "en", "de", train=[str(tmp_path / "crawl")]) == {"train": 2}
    assert (tmp_path / "out" / "train.de").read_text(encoding="utf-8") == "Ein Hund\nKatze\n"
    assert "replaced control characters by spaces in 1 pairs" in caplog.text
    splits, _ = load_parallel_data(_args(train_file=tmp_path / "out" / "train"), cache_dir=tmp_path / "cache")
    assert splits["train"][0]["translation"] == {"de": "Ein Hund", "en": "A dog"}


# ---- a folder given as a file ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["corpus", "train.jsonl", "valid.tsv"])
def test_a_split_file_that_is_a_folder_is_named_as_one(tmp_path: Path, name: str) -> None:
    (tmp_path / name).mkdir()
    option = "validation_file" if name.startswith("valid") else "train_file"
    _write(tmp_path / "train.de", DE)
    _write(tmp_path / "train.en", EN)
    args = {"train_file": tmp_path / "train", option: tmp_path / name}
    with pytest.raises(ParallelDataError, match=rf"^--{option} {re.escape(str(tmp_path / name))}: is a folder, give"):
        load_parallel_data(_args(**args), cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("fault", ["nul", "folder"])
def test_vaswani_train_reports_them_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture, fault: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    _write(data / "train.de", DE)
    _write(data / "train.en", [EN[0], "Two\x00men", EN[2]])
    train_file = data / "train" if fault == "nul" else data
    argv = [*TINY_RUN, "--source_lang", "de", "--target_lang", "en", "--train_file", train_file]
    status, stderr = run_cli("train", *argv, "--output_dir", tmp_path / "run", capsys=capsys)
    expected = (
        f"{data / 'train.en'}:2: control character U+0000" if fault == "nul" else f"--train_file {data}: is a folder"
    )
    assert_one_line_error(status, stderr, "train", expected)


def test_a_pair_half_that_is_a_folder_is_named_as_one(tmp_path: Path) -> None:
    _write(tmp_path / "train.de", DE)
    (tmp_path / "train.en").mkdir()
    with pytest.raises(ParallelDataError, match=r"train\.en' is a folder, give a file"):
        load_parallel_data(_args(train_file=tmp_path / "train"), cache_dir=tmp_path / "cache")


# ---- damaged caches -------------------------------------------------------------------------------------------------

# (glob under the cache root, the warning that names it)
CACHE_FILES = {
    "text meta": ("text/train-*/meta.json", "the cached train split {folder} is damaged"),
    "text arrow": ("text/train-*/data.arrow", "the cached train split {folder} is damaged"),
    "bpe json": ("bpe-*/tokenizer.json", "the cached BPE tokenizer {folder} is damaged"),
    "bpe record": ("bpe-*/cache_record.json", "the cached BPE tokenizer {folder} is damaged"),
    "tokenised meta": ("tokenized-*/meta.json", "the tokenised-data cache {folder} is damaged"),
    "tokenised arrow": ("tokenized-*/train.arrow", "the tokenised-data cache {folder} is damaged"),
}


def _pipeline(data: Path, cache: Path) -> dict[str, list]:
    """Text -> BPE -> tokenised splits, every stage through its cache under `cache`; the ids of every split."""
    raw = load_parallel_data(_args(data_dir=data), cache_dir=cache).splits
    tokenizer = load_or_train_tokenizer(None, raw["train"], "de", "en", vocab_size=60, cache_dir=cache)
    tokenised = tokenize_to_cache(raw, tokenizer, "de", "en", 64, 64, cache_root=cache, batch_size=7, num_workers=1)
    return {split: [list(dataset["input_ids"]), list(dataset["labels"])] for split, dataset in tokenised.items()}


@pytest.mark.parametrize("damage", ["empty", "cut"])
@pytest.mark.parametrize("which", list(CACHE_FILES))
def test_a_damaged_cache_is_named_and_rebuilt_with_the_same_ids(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, which: str, damage: str
) -> None:
    data, cache = tmp_path / "data", tmp_path / "cache"
    data.mkdir()
    for name, lines in (("train.de", DE * 20), ("train.en", EN * 20), ("valid.de", DE), ("valid.en", EN)):
        _write(data / name, lines)
    expected = _pipeline(data, cache)

    pattern, notice = CACHE_FILES[which]
    (path,) = cache.glob(pattern)
    content = path.read_bytes()
    path.write_bytes(b"" if damage == "empty" else content[: len(content) // 2])
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert _pipeline(data, cache) == expected
    warnings = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    assert len(warnings) == 1 and notice.format(folder=path.parent) in warnings[0], warnings
    assert "\n" not in warnings[0]
    # Rebuilt in place: the next run reads it back without a word.
    (rebuilt,) = cache.glob(pattern)
    assert rebuilt.stat().st_size == len(content)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert _pipeline(data, cache) == expected
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]
