"""One log for the seven commands: the same line format, the libraries quiet, progress bars only on a terminal.

Every command calls `setup_logging` once, after its arguments are checked and before its work:

    HH:MM:SS LEVEL name: message

Without --verbose the libraries (transformers, datasets, huggingface_hub, accelerate, torch; and the explorer's gradio,
httpx and httpcore, whose INFO lines are a line per HTTP request) keep to warnings and errors, and
transformers' own progress bars ("Loading weights", "Writing model shards") are off: a command shows its own progress
and results. A progress bar is drawn only where a person watches a terminal (`show_progress_bar`); in a file the
commands write a plain line now and then instead (the training run: recipe/console.py).

Standard library only, and nothing here imports the libraries it quiets: they are set when already imported, and the
environment variables they read at import time are set for the ones imported later.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TextIO

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DATE_FORMAT = "%H:%M:%S"
# Read by huggingface_hub at import; transformers' progress bars start from huggingface_hub's setting.
PROGRESS_ENV = "HF_HUB_DISABLE_PROGRESS_BARS"
_HANDLER_NAME = "hf_vaswani_training"
QUIET_LIBRARIES = ("transformers", "datasets", "huggingface_hub", "accelerate", "torch", "gradio", "httpx", "httpcore")


def setup_logging(verbose: bool = False, *, stream: TextIO | None = None, level: int = logging.INFO) -> None:
    """The one log format on `stream` (stderr by default: a command's stdout may be its result), our own messages at
    `level`, the libraries' at WARNING unless `verbose`."""
    handler = (
        _StandardStream("stderr")
        if stream in (None, sys.stderr)
        else (_StandardStream("stdout") if stream is sys.stdout else logging.StreamHandler(stream))
    )
    handler.setFormatter(logging.Formatter(FORMAT, DATE_FORMAT))
    handler.set_name(_HANDLER_NAME)
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:  # a second call replaces the first
        root.removeHandler(old)  # (tests run several commands in one process; others' handlers stay)
    root.addHandler(handler)
    root.setLevel(level)
    quiet_libraries(verbose)


class _StandardStream(logging.StreamHandler):
    """Writes to sys.stdout or sys.stderr as they are when a line is logged (not as they were when logging was set
    up): a test's captured stream, closed after the test, is not written to by the lines logged at exit."""

    def __init__(self, name: str):
        self._which = name
        super().__init__()

    @property
    def stream(self) -> TextIO:
        return getattr(sys, self._which)

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ sets it; the property decides
        pass


def quiet_libraries(verbose: bool = False) -> None:
    """The libraries' INFO logs and transformers' progress bars off (on with `verbose`)."""
    library_level = logging.INFO if verbose else logging.WARNING
    if not verbose:
        os.environ.setdefault(PROGRESS_ENV, "1")
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(library_level)
    transformers = sys.modules.get("transformers")
    if transformers is not None:
        transformers.utils.logging.set_verbosity(library_level)
        transformers.utils.logging.disable_default_handler()  # its records reach the root handler, in our format
        transformers.utils.logging.enable_propagation()
        if verbose:
            transformers.utils.logging.enable_progress_bar()
        else:
            transformers.utils.logging.disable_progress_bar()
    datasets = sys.modules.get("datasets")
    if datasets is not None:
        datasets.utils.logging.set_verbosity(library_level)
        library_logger = logging.getLogger("datasets")
        for default in [h for h in library_logger.handlers if type(h) is logging.StreamHandler]:
            library_logger.removeHandler(default)  # its own stderr handler: its records reach ours, once
        if not verbose:
            datasets.disable_progress_bars()
    hub = sys.modules.get("huggingface_hub")
    if hub is not None and not verbose:
        hub.utils.disable_progress_bars()


def show_progress_bar(stream: TextIO | None = None) -> bool:
    """Whether a progress bar is drawn: only on a terminal (in a file, its carriage-return updates make one long
    line)."""
    stream = sys.stderr if stream is None else stream
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
