"""Reading text files as strict UTF-8, line by line, with errors that name the file and the line.

Shared by the data path (training/data.py) and the translate CLI (training/translate.py). It imports neither
torch nor datasets, so the CLI can read and check its input before the heavy imports.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from .cli import UsageError


def decode_lines(lines: Iterable[bytes], name: str, error: type[UsageError] = UsageError) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, text without its line terminator) for each line of `lines`.

    A line that is not UTF-8 raises `error` (a UsageError) naming `name`, the line and the byte, instead of a
    UnicodeDecodeError with an offset into the whole file. A byte-order mark before the first line is dropped:
    it is not part of the first sentence.
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
        yield number, text.rstrip("\r\n")
