"""Reading text files as strict UTF-8, line by line, with errors that name the file and the line, and the parallel
formats built on it: text pairs (PREFIX.SRC / PREFIX.TGT, optionally .gz), JSON lines and TSV.

Shared by the data path (corpora.py, prepare_wmt.py) and the translate CLI (serving/translate.py). It imports
neither torch nor datasets, so the CLI can read and check its input before the heavy imports.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterable, Iterator
from itertools import zip_longest
from pathlib import Path

from ..usage import UsageError

# Control characters refused in training text: C0 (U+0000-U+001F) except the tab, DEL (U+007F) and C1
# (U+0080-U+009F). None is text: a NUL or a form feed is a file damaged or of another kind, C1 is almost always
# cp1252 text decoded as Latin-1 (mojibake), and each would otherwise become a vocabulary token of its own.
# The tab stays: it is the TSV separator, and an ordinary character of a sentence elsewhere. Line terminators
# (\n, and \r before it) end the line and are not part of it; a lone \r inside a line is refused.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def control_character_problem(text: str) -> str | None:
    """What `text` holds that training text may not (see CONTROL_CHARACTERS), or None: `control character U+0000
    at column 7`."""
    found = CONTROL_CHARACTERS.search(text)
    if found is None:
        return None
    return f"control character U+{ord(found.group()):04X} at column {found.start() + 1}"


def decode_lines(
    lines: Iterable[bytes], name: str, error: type[UsageError] = UsageError, *, refuse_controls: bool = False
) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, text without its line terminator) for each line of `lines`.

    A line that is not UTF-8 raises `error` (a UsageError) naming `name`, the line and the byte, instead of a
    UnicodeDecodeError with an offset into the whole file. A byte-order mark before the first line is dropped:
    it is not part of the first sentence. With `refuse_controls` (training text), a control character other
    than the tab (CONTROL_CHARACTERS) raises `error` the same way.
    """
    for number, raw in enumerate(lines, start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise error(
                f"{name}:{number}: invalid UTF-8 (byte 0x{raw[err.start]:02x} at column {err.start + 1}); "
                f"save line {number} as UTF-8"
            ) from None
        if number == 1:
            text = text.removeprefix("\ufeff")
        text = text.rstrip("\r\n")
        # isprintable() (fast, in C) is False for every control character, and for a tab or a no-break space too.
        if refuse_controls and not text.isprintable() and CONTROL_CHARACTERS.search(text):
            raise error(
                f"{name}:{number}: {control_character_problem(text)}; training text may hold no control characters "
                f"but the tab: remove it from line {number}"
            )
        yield number, text


class ParallelDataError(UsageError):
    """Malformed parallel data, or data arguments that do not fit together; the message names the file (and line)
    or the argument and what is wrong. A UsageError (so a ValueError): the console scripts print it as one line."""


class DataFileNotFoundError(ParallelDataError, FileNotFoundError):
    """A named data file, pair half or folder does not exist (also a FileNotFoundError, as it always was)."""


# ---- parallel text files --------------------------------------------------------------------------------------------


def pair_half(prefix: Path, lang: str) -> Path:
    plain = prefix.with_name(f"{prefix.name}.{lang}")
    compressed = prefix.with_name(f"{prefix.name}.{lang}.gz")
    if plain.is_file():
        return plain
    if compressed.is_file():
        return compressed
    for half in (plain, compressed):
        if half.is_dir():
            raise ParallelDataError(f"parallel text file {str(half)!r} is a folder, give a file")
    raise DataFileNotFoundError(
        f"parallel text file {str(plain)!r} (or {compressed.name!r}) does not exist; a split given as a "
        "prefix needs PREFIX.SRC and PREFIX.TGT, and other formats need a .jsonl, .json or .tsv extension"
    )


def iter_lines(path: Path, refuse_controls: bool = True) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, text without the line terminator), decoding strict UTF-8 line by line; a control
    character (CONTROL_CHARACTERS) stops with the file and line unless `refuse_controls` is False."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as handle:
        yield from decode_lines(handle, str(path), ParallelDataError, refuse_controls=refuse_controls)


def read_text_pair(source_path: Path, target_path: Path, refuse_controls: bool = True) -> Iterator[tuple[str, str]]:
    source_lines, target_lines = iter_lines(source_path, refuse_controls), iter_lines(target_path, refuse_controls)
    count = 0
    for source, target in zip_longest(source_lines, target_lines):
        if source is None or target is None:
            # One file ended first: count the rest of the other for the message.
            source_count = count + (0 if source is None else 1 + sum(1 for _ in source_lines))
            target_count = count + (0 if target is None else 1 + sum(1 for _ in target_lines))
            raise ParallelDataError(
                f"parallel files are not line-aligned: {source_path} has {source_count} lines but {target_path} "
                f"has {target_count} lines"
            )
        count += 1
        yield source[1].strip(), target[1].strip()


def read_jsonl_pairs(path: Path, source_lang: str, target_lang: str) -> Iterator[tuple[str, str]]:
    for lineno, line in iter_lines(path):
        if not line.strip():
            yield "", ""  # a blank line is a pair with both sides empty
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            hint = " (a JSON array is not supported: write one object per line)" if line.lstrip() == "[" else ""
            raise ParallelDataError(f"{path}:{lineno}: not valid JSON: {err.msg} at column {err.colno}{hint}") from err
        translation = record.get("translation") if isinstance(record, dict) else None
        if not isinstance(translation, dict):
            raise ParallelDataError(
                f"{path}:{lineno}: expected an object with key 'translation' holding "
                f'{{"{source_lang}": ..., "{target_lang}": ...}}'
            )
        texts = []
        for lang in (source_lang, target_lang):
            if lang not in translation:
                raise ParallelDataError(
                    f"{path}:{lineno}: 'translation' has no key {lang!r} (keys: {sorted(translation)})"
                )
            value = translation[lang]
            if not isinstance(value, str):
                raise ParallelDataError(
                    f"{path}:{lineno}: translation[{lang!r}] is {type(value).__name__}, expected a string"
                )
            problem = control_character_problem(value)
            if problem is not None:  # an escape such as \u0000 gets past the line's own check
                raise ParallelDataError(
                    f"{path}:{lineno}: translation[{lang!r}] has a {problem} of the value; training text may hold "
                    "no control characters but the tab"
                )
            texts.append(value.strip())
        yield texts[0], texts[1]


def read_tsv_pairs(path: Path, source_lang: str, target_lang: str) -> Iterator[tuple[str, str]]:
    source_index, target_index = 0, 1
    for lineno, line in iter_lines(path):
        if not line.strip():
            yield "", ""  # a blank line is a pair with both sides empty
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            raise ParallelDataError(
                f"{path}:{lineno}: expected 2 tab-separated fields ({source_lang}, {target_lang}), found {len(fields)}"
            )
        stripped = [field.strip() for field in fields]
        if lineno == 1 and sorted(stripped) == sorted([source_lang, target_lang]):
            # A header of language codes fixes the column order.
            source_index, target_index = stripped.index(source_lang), stripped.index(target_lang)
            continue
        yield stripped[source_index], stripped[target_index]
