"""The front door: the seven console scripts.

    vaswani-train        recipe/train.py         the paper's recipe (§5), data to packaged model
    vaswani-average      recipe/average_checkpoints.py    checkpoint averaging (§6.1)
    vaswani-prepare-wmt  data/prepare_wmt.py     WMT 2014 files into the training layout (§5.1)
    vaswani-translate    serving/translate.py    the paper's decoding (§6.1) or CTranslate2
    vaswani-export       serving/export.py       ONNX / CTranslate2
    vaswani-push         serving/push.py         a model folder to the Hub
    vaswani-explore      serving/explore.py      the attention explorer (a Gradio page)

Each command parses its arguments and checks the files they name here, with the standard library only (usage.py),
and imports its module, and with it torch, datasets or gradio, only when the checks pass: a mistake is answered in a
moment, as one line, and not after minutes of work. What was read here (vaswani-train's recipe and options, the
model folder it checked) is handed on and not read again. `python -m training.X` in a checkout runs the same
functions through the small modules named after the commands beside this file.
"""

from __future__ import annotations

import ast
import difflib
import math
import os
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from pathlib import Path

from .usage import (
    TrainRequest,
    UsageError,
    check_hub_repo,
    check_model_dir,
    check_output_dir,
    looks_like_local_path,
    raw_options,
    run_command,
    split_recipe,
)

# The model (hf_vaswani) loads on every transformers 5.x; the training side drives the Trainer's internals
# (checkpoint rotation, prediction_step) and is tested on this release and newer only: on 5.0 it fails to import.
TRAINING_MIN_TRANSFORMERS = "5.23.0"


def check_training_transformers(installed: str | None = None) -> None:
    """Refuse, in one line, a transformers release that the training recipe was never run on."""
    from importlib.metadata import version

    from packaging.version import Version

    installed = installed or version("transformers")
    if Version(installed) < Version(TRAINING_MIN_TRANSFORMERS):
        raise UsageError(
            f"training needs transformers>={TRAINING_MIN_TRANSFORMERS},<6 and this is {installed} (the model itself "
            f'loads on >=5.0 for translation): pip install "transformers>={TRAINING_MIN_TRANSFORMERS},<6"'
        )


# Where vaswani-train's options are declared: its own dataclasses and the Trainer's (read as source, not imported).
_OWN_ARGUMENT_FILES = ("recipe/arguments.py", "data/arguments.py")
_TRAINER_ARGUMENT_FILES = ("training_args.py", "training_args_seq2seq.py")


@cache
def training_option_names() -> frozenset[str]:
    """Every field name of vaswani-train's three argument dataclasses and the Trainer's bases, read from their source
    with `ast` (importing them would load torch). A superset is harmless here: a name not in it is certainly unknown,
    and the real parser, later, judges the rest. Empty when a file cannot be found (the check is then skipped)."""
    import importlib.util

    spec = importlib.util.find_spec("transformers")
    if spec is None or spec.origin is None:
        return frozenset()
    here, transformers_dir = Path(__file__).resolve().parent, Path(spec.origin).parent
    files = [here / name for name in _OWN_ARGUMENT_FILES] + [transformers_dir / n for n in _TRAINER_ARGUMENT_FILES]
    names: set[str] = set()
    for path in files:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError):
            return frozenset()
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                names |= {
                    s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                }
    return frozenset(names)


def _field_of(option: str) -> str:
    """`--no-foo-bar`, `--foo-bar`, `--foo_bar` -> `foo_bar`: every spelling HfArgumentParser gives a field."""
    name = option.lstrip("-").split("=", 1)[0].replace("-", "_")
    return name


def check_training_option_names(recipe: Path | None, keys: Iterable[str], argv: Sequence[str]) -> None:
    """A misspelt recipe key or option is answered here, before torch, with the closest name."""
    known = training_option_names()
    if not known:
        return

    def unknown(name: str) -> bool:
        return name not in known and not (name.startswith("no_") and name[3:] in known)

    def hint(name: str) -> str:
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
        return f"; did you mean {close[0]!r}?" if close else "; vaswani-train --help lists the valid names"

    bad_keys = [key for key in keys if unknown(str(key))]
    if bad_keys:
        more = f" (also unknown: {', '.join(bad_keys[1:])})" if len(bad_keys) > 1 else ""
        raise UsageError(f"{recipe}: unknown key {bad_keys[0]!r}{more}{hint(bad_keys[0])}")
    for token in argv:
        if token == "--":
            break
        if token.startswith("--") and token not in ("--help", "--debug") and unknown(_field_of(token)):
            name = _field_of(token)
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
            suggestion = f"; did you mean --{close[0]}?" if close else "; see --help for the options"
            raise UsageError(f"unknown option {token.split('=', 1)[0]}{suggestion} (see vaswani-train --help)")


def _check_training_values(options: dict[str, str], recipe: Path | None, command_line: Sequence[str]) -> None:
    """The value checks that need no torch: the ones a user meets first, answered before minutes of imports. A value
    that came from the recipe is reported with the recipe's name, as the full parser does."""

    def where(name: str) -> str:
        given = any(token.split("=", 1)[0] == f"--{name}" for token in command_line)
        return "" if given or recipe is None else f"{recipe}: key {name!r}: "

    if "output_dir" in options and not options["output_dir"].strip():
        raise UsageError(
            f"{where('output_dir')}--output_dir is empty: give the folder the run writes (e.g. outputs/toy)"
        )
    steps = _option_number(options, "max_steps", int, where)
    if steps is not None and (steps == 0 or steps < -1):
        raise UsageError(
            f"{where('max_steps')}--max_steps {steps}: must be 1 or more (or -1 for --num_train_epochs); 0 steps "
            "train no model"
        )
    rate = _option_number(options, "learning_rate", float, where)
    if rate is not None and (not math.isfinite(rate) or rate < 0):
        raise UsageError(
            f"{where('learning_rate')}--learning_rate {options['learning_rate']}: must be a finite number >= 0 (0, "
            "the default, is the paper's schedule peak)"
        )


def _option_number(options: dict[str, str], name: str, kind: type, where: Callable[[str], str]) -> float | None:
    """options[name] as `kind` (int or float), None when not given; a UsageError when it is not such a number."""
    if name not in options:
        return None
    try:
        return kind(options[name])
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise UsageError(f"{where(name)}--{name} {options[name]}: not {what} ({options[name]!r})") from None


def preflight_train(argv: Sequence[str]) -> TrainRequest:
    """vaswani-train's checks before torch: the recipe, and the folders and files the arguments name. Returns what
    was read, for recipe/train.py to use instead of reading it again."""
    check_training_transformers()
    recipe, values, rest = split_recipe(argv)
    check_training_option_names(recipe, values, rest)
    options = raw_options(values, rest)
    _check_training_values(options, recipe, rest)
    model = options.get("model_name_or_path")
    if model:
        needs_tokenizer = not options.get("tokenizer_name_or_path")  # the model's own tokenizer is used
        check_model_dir(model, "--model_name_or_path", needs_tokenizer=needs_tokenizer)
    tokenizer = options.get("tokenizer_name_or_path")
    if tokenizer and not Path(tokenizer).exists() and looks_like_local_path(tokenizer):
        raise UsageError(f"--tokenizer_name_or_path {tokenizer}: no such folder")
    dataset = options.get("dataset_name")
    if dataset and not Path(dataset).exists():
        check_hub_repo(dataset, "--dataset_name", repo_type="dataset")
    data_dir = options.get("data_dir")
    if data_dir and not Path(data_dir).is_dir():
        raise UsageError(
            f"--data_dir {data_dir}: no such folder (relative paths are relative to {Path.cwd()}); pass --data_dir "
            "with the folder of train/valid/test files"
        )
    check_output_dir(options.get("output_dir"), "--output_dir")
    resume = options.get("resume_from_checkpoint")
    if resume and resume not in ("True", "true", "False", "false", "last", "None") and not Path(resume).is_dir():
        raise UsageError(f"--resume_from_checkpoint {resume}: no such checkpoint folder (or pass True for the last)")
    return TrainRequest(recipe=recipe, values=values, argv=tuple(rest), checked_model=model)


def _train(argv: list[str]) -> int:
    request = preflight_train(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from .recipe import train as train_module

    train_module.main(request)
    return 0


def _translate(argv: list[str]) -> int:
    from .serving import translate as translate_module

    return translate_module.main(argv)


def _export(argv: list[str]) -> int:
    from .serving import export as export_module

    return export_module.main(argv)


def _push(argv: list[str]) -> int:
    from .serving import push as push_module

    push_module.main(argv)
    return 0


def _average(argv: list[str]) -> int:
    from .recipe import average_checkpoints

    average_checkpoints.main(argv)
    return 0


def _prepare_wmt(argv: list[str]) -> int:
    from .data import prepare_wmt

    return prepare_wmt.main(argv)


def _explore(argv: list[str]) -> int:
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
