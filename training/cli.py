"""The front door: the seven console scripts.

    vaswani-train        recipe/train.py         the paper's recipe (§5), data to packaged model
    vaswani-average      recipe/average_checkpoints.py    checkpoint averaging (§6.1)
    vaswani-prepare-wmt  data/prepare_wmt.py     WMT 2014 files into the training layout (§5.1)
    vaswani-translate    serving/translate.py    the paper's decoding (§6.1) or CTranslate2
    vaswani-export       serving/export.py       ONNX / CTranslate2
    vaswani-push         serving/push.py         a model folder to the Hub
    vaswani-explore      serving/explore.py      the attention explorer (a Gradio page)

This file is the door only: each function names its command for the one-line errors (usage.run_command) and hands
the arguments on. Each command checks its arguments and the files they name with the standard library first, and
imports torch, datasets or gradio only when the checks pass: a mistake is answered in a moment, as one line, and not
after minutes of work. vaswani-train's checks run here, before its module is imported (recipe/options.py:
preflight_train, whose reading of the recipe and options is handed on and not read again); the other commands check
in their own modules, which load the heavy libraries inside their main(). Every door of a command that loads torch
calls threads.passive_waits() before it imports the command's module (OpenMP reads OMP_WAIT_POLICY once, when torch
loads). Every command keeps the libraries' logs to warnings unless --verbose (console.py). `python -m training.X` in a
checkout runs the same functions through the small modules named after the commands beside this file.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from .recipe.options import preflight_train
from .threads import passive_waits
from .usage import run_command


def _train(argv: list[str]) -> int:
    request = preflight_train(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    passive_waits()  # before torch loads: OpenMP threads sleep at barriers, not spin on a core another one needs
    from .recipe import train as train_module

    train_module.main(request)
    return 0


def _translate(argv: list[str]) -> int:
    passive_waits()
    from .serving import translate as translate_module

    return translate_module.main(argv)


def _export(argv: list[str]) -> int:
    passive_waits()
    from .serving import export as export_module

    return export_module.main(argv)


def _push(argv: list[str]) -> int:
    passive_waits()  # push loads the model (torch) to check it before the upload
    from .serving import push as push_module

    push_module.main(argv)
    return 0


def _average(argv: list[str]) -> int:
    passive_waits()
    from .recipe import average_checkpoints

    average_checkpoints.main(argv)
    return 0


def _prepare_wmt(argv: list[str]) -> int:
    from .data import prepare_wmt

    return prepare_wmt.main(argv)


def _explore(argv: list[str]) -> int:
    passive_waits()
    from .serving import explore

    return explore.main(argv)


def train(argv: Sequence[str] | None = None) -> int:
    """`vaswani-train [RECIPE] [--option value ...]`: RECIPE is a file or a shipped recipe's name (toy, multi30k)."""
    return run_command("vaswani-train", _train, argv)


def average(argv: Sequence[str] | None = None) -> int:
    """`vaswani-average --run-dir DIR --last N --output DIR` or `--inputs CKPT ... --output DIR`"""
    return run_command("vaswani-average", _average, argv)


def prepare_wmt(argv: Sequence[str] | None = None) -> int:
    """`vaswani-prepare-wmt ...`: WMT 2014 files (text pairs, .sgm or a datasets name) into the training layout."""
    return run_command("vaswani-prepare-wmt", _prepare_wmt, argv)


def translate(argv: Sequence[str] | None = None) -> int:
    """`vaswani-translate MODEL_DIR [SENTENCE ...] [--input FILE] ...`"""
    return run_command("vaswani-translate", _translate, argv)


def export(argv: Sequence[str] | None = None) -> int:
    """`vaswani-export MODEL_DIR OUT_DIR [--check]`"""
    return run_command("vaswani-export", _export, argv)


def push(argv: Sequence[str] | None = None) -> int:
    """`vaswani-push MODEL_DIR REPO_ID [--private] ...`"""
    return run_command("vaswani-push", _push, argv)


def explore(argv: Sequence[str] | None = None) -> int:
    """`vaswani-explore MODEL [--host H] [--port N] ...`"""
    return run_command("vaswani-explore", _explore, argv)
