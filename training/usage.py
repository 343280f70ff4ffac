"""The ground floor of every command: the user-error contract, the argument parser and types, and the checks of
files, model folders and recipes that need no torch.

A mistake of the user's (a wrong option, a missing or corrupted file, bad data) is a `UsageError`: the command prints
it as ONE line on standard error, naming the file/line/option, what is wrong and how to fix it, and exits with status
2 (argparse's own status for bad arguments). Any other exception is a bug and shows its traceback. `--debug` (any
command) or `HF_VASWANI_DEBUG=1` shows the traceback of user errors too.

Exit status: 0 success; 1 the work ran but a check it was asked for failed (`vaswani-export --check` with tokens
that differ); 2 a user error (one line on stderr); 130 interrupted; anything else a bug.

This module imports only the standard library at its top, and imports nothing of this package: every other module
may import it, and cli.py (the front door) runs its checks before torch, transformers, datasets or gradio load.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

EXIT_FAILED_CHECK = 1
EXIT_USAGE = 2
DEBUG_ENV = "HF_VASWANI_DEBUG"
RECIPES_DIR = Path(__file__).resolve().parent / "recipe" / "recipes"
RECIPE_SUFFIXES = (".json", ".yaml", ".yml")
# What `from_pretrained` accepts as weights; a model folder needs one of them.
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
# A safetensors header is a JSON table of contents; anything beyond this is not a header but garbage.
_MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024
_TRAINER_DEBUG_VALUES = ("underflow_overflow", "tpu_metrics_debug", "underflow_overflow tpu_metrics_debug")


class UsageError(ValueError):
    """A mistake in the user's arguments, files or data. The message is one line: where (file/line/option), what
    is wrong, and the fix. The console scripts print it without a traceback and exit with status 2.

    A ValueError, so that library callers that catch ValueError for bad arguments keep working."""


# ---- argument parsing -----------------------------------------------------------------------------------------------


class ArgumentParser(argparse.ArgumentParser):
    """argparse without prefix matching (`--max_step` is not `--max_steps`), whose errors are UsageErrors: one line
    with a suggestion for a misspelt option, instead of the usage block and exit status 2 from inside parse_args."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # argparse's hook for every parsing error
        if message.startswith("unrecognized arguments:"):
            unknown = message.split(":", 1)[1].split()
            message = unknown_options_message(unknown, self.option_strings(), where="")
        raise UsageError(f"{message} (see {self.prog} --help)")

    def option_strings(self) -> list[str]:
        return [option for action in self._actions for option in action.option_strings]


def unknown_options_message(unknown: Sequence[str], known: Iterable[str], where: str) -> str:
    """'unknown option --max_stpes (did you mean --max_steps?)' for the first unknown option among `unknown`."""
    known = sorted(set(known))
    options = [token.split("=", 1)[0] for token in unknown if token.startswith("-")]
    if not options:
        return f"{where}unexpected argument(s) {' '.join(unknown)!s}"
    option = options[0]
    close = difflib.get_close_matches(option, known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else "; see --help for the options"
    more = f" (and {len(options) - 1} more: {' '.join(options[1:])})" if len(options) > 1 else ""
    return f"{where}unknown option {option}{more}{hint}"


def _int_at_least(minimum: int, requirement: str) -> Callable[[str], int]:
    """An argparse type: an integer >= `minimum`; `requirement` ends the error message."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(f"{value} {requirement}")
        return number

    return parse


positive_int = _int_at_least(1, "must be a positive integer (1 or more)")
non_negative_int = _int_at_least(0, "must be 0 or more")


# ---- checks that need no torch ----------------------------------------------------------------------------------------


def looks_like_local_path(value: str) -> bool:
    """True when `value` can only mean a local path, never a Hub repository id ("name" or "owner/name"): it starts
    with / . ~ or a drive letter, has more than one slash or a backslash, or its first component exists here (so
    "outputs/toy" while ./outputs exists)."""
    if value.startswith(("/", ".", "~")) or "\\" in value or value.count("/") > 1 or value.endswith("/"):
        return True
    if len(value) > 1 and value[1] == ":":
        return True
    return "/" in value and Path(value.split("/", 1)[0]).is_dir()


def safetensors_problem(path: Path) -> str | None:
    """Why `path` is not a whole safetensors file, or None when it is. Reads the header only (a few KB): an 8-byte
    length, a JSON table of tensors, and their data, which must end exactly at the end of the file."""

    def corrupted(reason: str) -> str:
        return f"{path} is truncated or corrupted ({reason})"

    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                return corrupted(f"{size} bytes, too short for a safetensors header")
            header_size = int.from_bytes(prefix, "little")
            if header_size > min(size - 8, _MAX_SAFETENSORS_HEADER):
                return corrupted(f"its header length, {header_size} bytes, exceeds the file")
            header = json.loads(handle.read(header_size))
    except OSError as error:
        return f"{path}: cannot be read ({error.strerror})"
    except (UnicodeDecodeError, json.JSONDecodeError):
        return corrupted("the safetensors header is not valid JSON")
    try:
        end = max((info["data_offsets"][1] for key, info in header.items() if key != "__metadata__"), default=0)
    except (AttributeError, KeyError, TypeError, IndexError):
        return corrupted("the safetensors header does not describe tensors")
    if 8 + header_size + end != size:
        return corrupted(f"the tensors need {8 + header_size + end} bytes but the file has {size}")
    return None


def check_safetensors(path: Path) -> None:
    """Raise a UsageError when `path` is not a whole safetensors file (see `safetensors_problem`)."""
    problem = safetensors_problem(path)
    if problem is None:
        return
    if "truncated or corrupted" in problem:
        problem += "; copy or save the model again"
    raise UsageError(problem)


def check_model_dir(value: str, option: str, *, hub_allowed: bool = True, needs_tokenizer: bool = False) -> None:
    """Check a model given as `value` by `option` ("MODEL_DIR", "--model_name_or_path"): a local folder must hold
    config.json (valid JSON), whole weights and, with `needs_tokenizer`, tokenizer files. A string that is not a
    local folder is left to the Hub only when it can be a repository id and `hub_allowed`; otherwise it is an
    error, answered without any network access."""
    path = Path(value).expanduser()
    hint = (
        "(a folder written by vaswani-train, or a Hub model id)"
        if hub_allowed
        else "(a folder written by vaswani-train)"
    )
    if path.is_file():
        raise UsageError(f"{option} {value}: is a file, not a model folder {hint}")
    if not path.is_dir():
        if hub_allowed and not looks_like_local_path(value):
            check_hub_repo(value, option)
            return
        raise UsageError(f"{option} {value}: no such folder {hint}")
    config = path / "config.json"
    if not config.is_file():
        raise UsageError(f"{option} {value}: the folder has no config.json, so it is not a model folder {hint}")
    try:
        json.loads(config.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UsageError(f"{config}: not valid JSON ({error}); save the model again") from None
    weights = [name for name in WEIGHT_FILES if (path / name).is_file()]
    if not weights:
        raise UsageError(f"{option} {value}: the folder has no weights ({', '.join(WEIGHT_FILES[:2])}, ...)")
    if weights[0] == "model.safetensors":
        check_safetensors(path / "model.safetensors")
    if needs_tokenizer and not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        raise UsageError(
            f"{option} {value}: the folder has no tokenizer (tokenizer.json); save the tokenizer with the model "
            "(tokenizer.save_pretrained(folder)), as vaswani-train does"
        )


def check_hub_repo(repo_id: str, option: str, repo_type: str = "model") -> None:
    """`repo_id` is not a local folder but could name a Hub repository: ask the Hub once (no retries, a short
    timeout) whether it exists, unless it is in the local cache. Loading would otherwise retry for ~20 s offline and
    end in chained tracebacks."""
    from huggingface_hub import HfApi, try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError, RepositoryNotFoundError

    cached_file = "config.json" if repo_type == "model" else "README.md"
    try:
        if isinstance(try_to_load_from_cache(repo_id, cached_file, repo_type=repo_type), str):
            return
        if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
            raise UsageError(
                f"{option} {repo_id}: no such folder, and HF_HUB_OFFLINE is set so the Hub is not asked (nor is "
                "it in the local cache)"
            )
        HfApi().repo_info(repo_id, repo_type=repo_type, timeout=10)
    except UsageError:
        raise
    except HFValidationError:
        raise UsageError(f"{option} {repo_id}: no such folder, and not a valid Hub repository id") from None
    except RepositoryNotFoundError:
        raise UsageError(
            f"{option} {repo_id}: no such folder here ({Path.cwd()}), and no such repository on the Hub (or it is "
            "private: log in with `hf auth login`)"
        ) from None
    except Exception as error:  # noqa: BLE001  the HTTP client's connection errors: whatever the Hub library uses
        raise UsageError(
            f"{option} {repo_id}: no such folder here ({Path.cwd()}), and the Hub cannot be reached to look for a "
            f"repository of that name ({type(error).__name__}); check the path"
        ) from None


def check_output_file(value: str | None, option: str) -> None:
    """An output file must be creatable: its folder exists and it is not itself a folder."""
    if value is None or value == "-":
        return
    path = Path(value)
    if path.is_dir():
        raise UsageError(f"{option} {value}: is a folder; give a file name")
    if not path.parent.is_dir():
        raise UsageError(f"{option} {value}: the folder {path.parent} does not exist; create it first")


def check_output_dir(value: str | None, option: str) -> None:
    if value is not None and Path(value).exists() and not Path(value).is_dir():
        raise UsageError(f"{option} {value}: is a file, not a folder; choose another {option}")


def require_extra(modules: Sequence[str], extra: str, needed_for: str) -> None:
    """Import `modules` now (before the work they are needed for) or say which extra installs them."""
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            raise UsageError(
                f'{needed_for} needs {name}, which is not installed: pip install "hf-vaswani[{extra}]"'
            ) from None


# ---- recipes ----------------------------------------------------------------------------------------------------------


def recipe_names() -> list[str]:
    return sorted(p.stem for p in RECIPES_DIR.iterdir() if p.suffix in RECIPE_SUFFIXES)


def find_recipe(value: str) -> Path:
    """A recipe given as a path, or by the name of one shipped with the package (`toy`, `multi30k`)."""
    path = Path(value)
    if path.is_file():
        return path
    for suffix in ("", *RECIPE_SUFFIXES):
        shipped = RECIPES_DIR / f"{value}{suffix}"
        if "/" not in value and shipped.is_file():
            return shipped
    names = recipe_names()
    close = difflib.get_close_matches(Path(value).stem, names, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise UsageError(
        f"recipe {value}: no such file, and the package has no recipe of that name (its recipes: "
        f"{', '.join(names)}){hint}"
    )


def read_recipe(path: Path) -> dict:
    """A JSON/YAML recipe: a mapping of argument names to values."""
    text = path.read_text(encoding="utf-8")
    if path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            values = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise UsageError(f"{path}: not valid YAML ({' '.join(str(error).split())})") from None
    else:
        try:
            values = json.loads(text)
        except json.JSONDecodeError as error:
            raise UsageError(f"{path}, line {error.lineno}: not valid JSON ({error.msg})") from None
    if not isinstance(values, dict):
        raise UsageError(f"{path}: a recipe must be a mapping of argument names to values")
    return values


@dataclass(frozen=True)
class TrainRequest:
    """What vaswani-train's front door (cli.py) read and checked before torch loaded, handed to recipe/train.py so
    that the recipe is not found, read and parsed twice, nor a model folder (perhaps on the Hub) checked twice."""

    recipe: Path | None  # the recipe file, or None when only options were given
    values: dict  # its values
    argv: tuple[str, ...]  # the options after it, which override it
    checked_model: str | None = None  # --model_name_or_path, already checked by check_model_dir


def recipe_to_argv(values: dict) -> list[str]:
    argv = []
    for key, value in values.items():
        values_list = value if isinstance(value, list) else [value]
        argv += [f"--{key}", *(str(v) for v in values_list)]
    return argv


def split_recipe(argv: Sequence[str]) -> tuple[Path | None, dict, list[str]]:
    """(recipe path, its values, the other arguments) for `vaswani-train [RECIPE] [--option value ...]`."""
    argv = list(argv)
    if argv and not argv[0].startswith("-"):
        path = find_recipe(argv[0])
        return path, read_recipe(path), argv[1:]
    return None, {}, argv


def raw_options(recipe: dict, argv: Sequence[str]) -> dict[str, str]:
    """The values of `--name value` / `--name=value` options, recipe first and the command line over it: enough to
    check the files a training run names before the real parser (which needs transformers) exists."""
    options = {key: str(value) for key, value in recipe.items() if not isinstance(value, list)}
    tokens = list(argv)
    for index, token in enumerate(tokens):
        if not token.startswith("--"):
            continue
        if "=" in token:
            name, value = token[2:].split("=", 1)
            options[name] = value
        elif index + 1 < len(tokens) and not tokens[index + 1].startswith("--"):
            options[token[2:]] = tokens[index + 1]
    return options


# ---- running a command --------------------------------------------------------------------------------------------------


def _debug_requested(argv: list[str]) -> tuple[bool, list[str]]:
    """--debug anywhere before a `--` separator, or HF_VASWANI_DEBUG=1; the flag is removed from argv."""
    end = argv.index("--") if "--" in argv else len(argv)
    # `--debug underflow_overflow` is the Trainer's own --debug option (with a value): left alone.
    flags = [
        index
        for index, token in enumerate(argv[:end])
        if token == "--debug" and (index + 1 == len(argv) or argv[index + 1] not in _TRAINER_DEBUG_VALUES)
    ]
    argv = [token for index, token in enumerate(argv) if index not in flags]
    return bool(flags) or os.environ.get(DEBUG_ENV, "").lower() in ("1", "true", "yes", "on"), argv


def one_line(message: str) -> str:
    return " ".join(str(message).split())


def run_command(prog: str, function: Callable[[list[str]], int | None], argv: Sequence[str] | None) -> int:
    """Run `function(argv)`; a UsageError becomes one line on stderr and exit status 2."""
    debug, args = _debug_requested(list(sys.argv[1:] if argv is None else argv))
    try:
        return function(args) or 0
    except UsageError as error:
        if debug:
            raise
        print(f"{prog}: error: {one_line(error)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
