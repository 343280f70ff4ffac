"""vaswani-train's command line, in one place: `vaswani-train [RECIPE] [--option value ...]`.

    the recipe        find_recipe, read_recipe, split_recipe: RECIPE is a JSON/YAML file or the name of one in
                      recipes/ beside this file (toy, multi30k, ...); the options after it override its values
    the pre-checks    preflight_train: the transformers release, misspelt keys and options (names read from the
                      argument dataclasses' source with `ast`), the values and files that need no torch. Returns a
                      TrainRequest, what was read, so that nothing is read twice
    the parser        parse_arguments: the three dataclasses (arguments.py here, data/arguments.py) through
                      HfArgumentParser, every error a UsageError naming the recipe or the option

Importing this module loads the standard library only (transformers, and with it torch, is imported inside
parse_arguments), so the console script (training/cli.py) answers a mistake in a moment, as one line, before torch.
recipe/train.py runs the recipe on what parse_arguments returns.
"""

from __future__ import annotations

import ast
import difflib
import json
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from ..usage import (
    UsageError,
    check_hub_repo,
    check_model_dir,
    check_output_dir,
    error_line,
    looks_like_local_path,
    number_problem,
    unknown_options_message,
)

if TYPE_CHECKING:
    from ..data.arguments import DataArguments
    from .arguments import ModelArguments, VaswaniTrainingArguments

RECIPES_DIR = Path(__file__).resolve().parent / "recipes"
RECIPE_SUFFIXES = (".json", ".yaml", ".yml")
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


# ---- the recipe -------------------------------------------------------------------------------------------------------


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
    """What vaswani-train's pre-checks (preflight_train) read and checked before torch loaded, handed to
    recipe/train.py so that the recipe is not found, read and parsed twice, nor a model folder (perhaps on the Hub)
    checked twice."""

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


# Where the data comes from: a Hub dataset (with its configuration and columns) or local files.
HUB_DATA_OPTIONS = ("dataset_name", "dataset_config_name", "source_column", "target_column")
FILE_DATA_OPTIONS = ("data_dir", "train_file", "validation_file", "test_file")


def split_recipe(argv: Sequence[str]) -> tuple[Path | None, dict, list[str]]:
    """(recipe path, its values, the other arguments) for `vaswani-train [RECIPE] [--option value ...]`.

    A data source named on the command line replaces the recipe's whole: `--data_dir`/`--*_file` drop the recipe's
    `dataset_name` (with its configuration and columns), and `--dataset_name` drops the recipe's local files, so
    `vaswani-train multi30k --data_dir DIR` reads DIR and never asks the Hub."""
    argv = list(argv)
    if not argv or argv[0].startswith("-"):
        return None, {}, argv
    path = find_recipe(argv[0])
    values, rest = read_recipe(path), argv[1:]
    end = rest.index("--") if "--" in rest else len(rest)
    named = {token.lstrip("-").split("=", 1)[0].replace("-", "_") for token in rest[:end] if token.startswith("--")}
    if named & set(FILE_DATA_OPTIONS):
        values = {key: value for key, value in values.items() if key not in HUB_DATA_OPTIONS}
    elif "dataset_name" in named:
        values = {key: value for key, value in values.items() if key not in FILE_DATA_OPTIONS + HUB_DATA_OPTIONS}
    return path, values, rest


def as_request(argv: Sequence[str]) -> TrainRequest:
    """Command-line arguments read as preflight_train reads them, without its checks."""
    recipe, values, rest = split_recipe(argv)
    return TrainRequest(recipe=recipe, values=values, argv=tuple(rest))


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


# ---- the pre-checks, before torch -----------------------------------------------------------------------------------

# Where vaswani-train's options are declared: its own dataclasses and the Trainer's (read as source, not imported).
_OWN_ARGUMENT_FILES = (Path("arguments.py"), Path("..", "data", "arguments.py"))  # relative to this folder
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


@cache
def training_option_types() -> dict[str, tuple[frozenset[str], frozenset[str] | None]]:
    """{field name: (the kinds of value its annotation allows, the kinds of a list's items or None)} for the fields
    of vaswani-train's dataclasses and the Trainer's, read with `ast` as training_option_names reads the names.
    Kinds: int, float, bool, str, none, dict, list, and any (an enum, Literal or other type not judged here). The
    first file that declares a field decides (ours override the Trainer's). Empty when a file cannot be found."""
    import importlib.util

    spec = importlib.util.find_spec("transformers")
    if spec is None or spec.origin is None:
        return {}
    here, transformers_dir = Path(__file__).resolve().parent, Path(spec.origin).parent
    files = [here / name for name in _OWN_ARGUMENT_FILES] + [transformers_dir / n for n in _TRAINER_ARGUMENT_FILES]
    types: dict[str, tuple[frozenset[str], frozenset[str] | None]] = {}
    for path in files:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError):
            return {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for statement in node.body:
                    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                        kinds, items = _annotation_kinds(statement.annotation)
                        types.setdefault(statement.target.id, (frozenset(kinds), items))
    return types


_SIMPLE_KINDS = {"int": "int", "float": "float", "bool": "bool", "str": "str", "None": "none", "dict": "dict"}


def _annotation_kinds(node: ast.expr) -> tuple[set[str], frozenset[str] | None]:
    """(kinds, list item kinds) of a type annotation's syntax tree: `int | None`, `Optional[Union[str, list[str]]]`."""
    if isinstance(node, ast.Constant):
        if node.value is None:
            return {"none"}, None
        if isinstance(node.value, str):  # a string annotation
            try:
                return _annotation_kinds(ast.parse(node.value, mode="eval").body)
            except SyntaxError:
                return {"any"}, None
        return {"any"}, None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _union(_annotation_kinds(node.left), _annotation_kinds(node.right))
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    if isinstance(node, ast.Subscript):
        outer = node.value.id if isinstance(node.value, ast.Name) else getattr(node.value, "attr", None)
        members = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if outer in ("Optional", "Union"):
            result: tuple[set[str], frozenset[str] | None] = ({"none"} if outer == "Optional" else set(), None)
            for member in members:
                result = _union(result, _annotation_kinds(member))
            return result
        if outer in ("list", "List"):
            return {"list"}, frozenset(_annotation_kinds(members[0])[0])
        if outer in ("dict", "Dict"):
            return {"dict"}, None
        return {"any"}, None
    return {_SIMPLE_KINDS.get(name, "any")}, None


def _union(first, second) -> tuple[set[str], frozenset[str] | None]:
    items = first[1] | second[1] if first[1] is not None and second[1] is not None else first[1] or second[1]
    return first[0] | second[0], items


def _fits(value: object, kinds: frozenset[str] | set[str]) -> bool:
    """Whether a recipe value (what JSON/YAML gives: None, bool, int, float, str, list, dict) suits `kinds`."""
    if "any" in kinds:
        return True
    if value is None:
        return "none" in kinds
    if isinstance(value, bool):  # before int: a bool is an int to Python
        return "bool" in kinds
    if isinstance(value, int):
        return bool(kinds & {"int", "float", "str"})
    if isinstance(value, float):
        return bool(kinds & {"float", "str"})
    if isinstance(value, str):  # YAML 1.1 reads 1e-3 (no dot) as a string: a number written so is a number
        return (
            "str" in kinds or ("float" in kinds and _parses(value, float)) or ("int" in kinds and _parses(value, int))
        )
    if isinstance(value, dict):
        return "dict" in kinds
    return False


def _parses(text: str, kind: type) -> bool:
    try:
        kind(text)
    except ValueError:
        return False
    return True


_KIND_WORDS = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "str": "a string",
    "none": "null",
    "dict": "a mapping",
}


def _kinds_text(kinds: Iterable[str], items: Iterable[str] | None) -> str:
    words = [_KIND_WORDS[kind] for kind in ("int", "float", "bool", "str", "dict") if kind in kinds]
    if "float" in kinds:
        words = [word for word in words if word != "an integer"]
    if "list" in kinds and items is not None:
        words.append(f"a list of {' or '.join(_kinds_text(items, None).split(' or '))}")
    if "none" in kinds:
        words.append("null")
    return " or ".join(words)


def _value_text(value: object) -> str:
    kind = {
        bool: "true/false",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
    }
    return f"{value!r} ({kind.get(type(value), type(value).__name__)})"


def check_recipe_types(recipe: Path | None, values: dict) -> None:
    """Each recipe value must be of its field's type (read from the dataclasses' source, training_option_types):
    a list for an integer (`max_steps: [30]`) or a string for a flag is refused here, naming the key and the recipe,
    instead of being turned into command-line words that happen to parse."""
    types = training_option_types()
    for key, value in values.items():
        if key not in types:
            continue  # a --no_* spelling, or a name the Trainer of another release has
        kinds, items = types[key]
        if isinstance(value, list):
            fits = "list" in kinds and items is not None and all(_fits(item, items) for item in value)
        else:
            fits = _fits(value, kinds) or ("list" in kinds and items is not None and _fits(value, items))
        if not fits:
            raise UsageError(
                f"{recipe}: key {key!r}: {_value_text(value)} is not what {key} takes ({_kinds_text(kinds, items)}); "
                f"write one such value ({key}: VALUE)"
            )


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
    if "final_eval_splits" in options:
        final_eval_split_names(options["final_eval_splits"], where("final_eval_splits"))
    for name, (kind, low, high, low_open, high_open, meaning) in TRAINING_RANGES.items():
        number = _option_number(options, name, kind, where)
        if number is None:
            continue
        problem = number_problem(number, low, high, low_open=low_open, high_open=high_open)
        if problem is not None:
            raise UsageError(f"{where(name)}--{name} {options[name]}: {problem} ({meaning})")


EVAL_SPLITS = ("validation", "test")


def final_eval_split_names(value: str, where: str = "") -> list[str]:
    """--final_eval_splits as a list: names of EVAL_SPLITS, or none (also ""). Any other name is a UsageError before
    any work: it used to be skipped without a word, so a typo trained a model and scored nothing."""
    if value.strip().lower() in ("", "none"):
        return []
    names = [name.strip() for name in value.split(",")]
    unknown = [name for name in names if name not in EVAL_SPLITS]
    if unknown:
        raise UsageError(
            f"{where}--final_eval_splits {value}: {', '.join(map(repr, unknown))} is not a split scored at the end; "
            f"give {' or '.join(EVAL_SPLITS)} (comma-separated), or none"
        )
    return names


# The numeric training values with an obvious range, checked before torch: name -> (type, low, high, low excluded,
# high excluded, what the value is). Floats must also be finite (nan and inf pass comparisons and train nothing).
TRAINING_RANGES: dict[str, tuple[type, float | None, float | None, bool, bool, str]] = {
    "warmup_steps": (float, 0, None, False, False, "warmup steps, or a fraction of the run below 1"),
    "label_smoothing_factor": (float, 0, 1, False, True, "epsilon_ls of §5.4, the paper's 0.1"),
    "dropout": (float, 0, 1, False, True, "a probability, the paper's 0.1"),
    "adam_beta1": (float, 0, 1, False, True, "Adam's beta1, the paper's 0.9"),
    "adam_beta2": (float, 0, 1, False, True, "Adam's beta2, the paper's 0.98"),
    "adam_epsilon": (float, 0, None, False, False, "Adam's epsilon, the paper's 1e-9"),
    "weight_decay": (float, 0, None, False, False, "0 in the paper"),
    "max_grad_norm": (float, 0, None, False, False, "0 clips nothing"),
    "length_penalty": (float, None, None, False, False, "GNMT alpha, the paper's 0.6"),
    "num_train_epochs": (float, 0, None, True, False, "passes over the training data"),
    "save_steps": (float, 0, None, True, False, "steps between checkpoints, or a fraction of the run below 1"),
    "logging_steps": (float, 0, None, True, False, "steps between log lines, or a fraction of the run below 1"),
    "eval_steps": (float, 0, None, True, False, "steps between evaluations, or a fraction of the run below 1"),
    "max_train_minutes": (float, 0, None, True, False, "a time budget in minutes"),
    "max_tokens": (int, 0, None, False, False, "tokens per batch; 0 uses --per_device_train_batch_size"),
    "eval_max_tokens": (int, 1, None, False, False, "padded source tokens per translation batch"),
    "per_device_train_batch_size": (int, 1, None, False, False, "sentences per batch"),
    "per_device_eval_batch_size": (int, 1, None, False, False, "sentences per batch"),
    "gradient_accumulation_steps": (int, 1, None, False, False, "batches per optimizer step"),
    "generation_num_beams": (int, 1, None, False, False, "the beam size, the paper's 4"),
    "max_length_offset": (int, 0, None, False, False, "outputs are at most source length + this"),
    "vocab_size": (int, 1, None, False, False, "the BPE vocabulary size"),
    "bpe_min_frequency": (int, 0, None, False, False, "a pair is merged only if it occurs this often"),
    "average_last_n": (int, 0, None, False, False, "checkpoints averaged, 0 or 1 disables"),
    "save_total_limit": (int, 1, None, False, False, "checkpoints kept"),
    "seed": (int, 0, 2**32 - 1, False, False, "a random seed"),
    "dataloader_num_workers": (int, 0, None, False, False, "data loading processes"),
    "preprocessing_num_workers": (int, 1, None, False, False, "tokenizing processes"),
    "toy_num_train": (int, 1, None, False, False, "training pairs of the embedded corpus"),
    "toy_num_validation": (int, 0, None, False, False, "validation pairs of the embedded corpus"),
    "toy_num_test": (int, 0, None, False, False, "test pairs of the embedded corpus"),
    "num_samples_to_print": (int, 0, None, False, False, "sample translations printed"),
}


def _option_number(options: dict[str, str], name: str, kind: type, where: Callable[[str], str]) -> float | None:
    """options[name] as `kind` (int or float), None when not given; a UsageError when it is not such a number."""
    if name not in options:
        return None
    try:
        return kind(options[name])
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise UsageError(f"{where(name)}--{name} {options[name]}: not {what} ({options[name]!r})") from None


def check_preset(preset: str | None) -> None:
    """--preset names a shipped preset (a NAME.json in hf_vaswani/presets/) or a config JSON file holding a JSON object:
    checked as JSON here, before torch, as recipe/train.py's load_preset would check it after."""
    import importlib.util

    spec = importlib.util.find_spec("hf_vaswani")
    if preset is None or spec is None or not spec.submodule_search_locations:
        return
    shipped = Path(next(iter(spec.submodule_search_locations))) / "presets"
    names = sorted(path.stem for path in shipped.glob("*.json"))
    path = Path(preset) if preset.endswith(".json") else shipped / f"{preset}.json"
    if not path.is_file():
        close = difflib.get_close_matches(preset, names, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UsageError(
            f"--preset {preset}: no file {path}; presets are {', '.join(names)} or a path to a config JSON{hint}"
        )
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise UsageError(
            f"--preset {path}, line {error.lineno}: not valid JSON ({error.msg}); a preset is a config JSON object"
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"--preset {path}: cannot be read ({error})") from None
    if not isinstance(values, dict):
        raise UsageError(f"--preset {path}: a preset is a JSON object of config values, not {type(values).__name__}")


def check_data_files(options: dict[str, str]) -> None:
    """--train_file, --validation_file and --test_file exist, before torch: a .jsonl/.json/.tsv file (.gz too), or a
    text-pair prefix with both halves (PREFIX.SRC and PREFIX.TGT), relative to --data_dir when given, as
    training/data/corpora.py reads them."""
    from ..data.textfiles import ParallelDataError, pair_half

    source, target, data_dir = options.get("source_lang"), options.get("target_lang"), options.get("data_dir")
    for name in ("train_file", "validation_file", "test_file"):
        value = options.get(name)
        if not value or value == "None":
            continue
        path = Path(value)
        if data_dir and not path.is_absolute():
            path = Path(data_dir) / path
        if path.is_dir():  # as training/data/corpora.py words it after torch
            raise UsageError(
                f"--{name} {value}: is a folder, give a file (.jsonl, .tsv or the prefix of a text pair; a folder of "
                "train/valid/test files is --data_dir)"
            )
        if Path(path.name.removesuffix(".gz")).suffix.lower() in (".jsonl", ".json", ".tsv"):
            if not path.is_file():
                raise UsageError(f"--{name} {value}: data file {str(path)!r} does not exist")
            continue
        if not (source and target):
            continue  # the data loader names the missing languages
        prefix = path
        for ending in (f".{source}", f".{source}.gz", f".{target}", f".{target}.gz"):
            if path.name.endswith(ending) and len(path.name) > len(ending):
                prefix = path.with_name(path.name[: -len(ending)])
        try:
            pair_half(prefix, source)
            pair_half(prefix, target)
        except ParallelDataError as error:
            raise UsageError(f"--{name} {value}: {error}") from None


def preflight_train(argv: Sequence[str]) -> TrainRequest:
    """vaswani-train's checks before torch: the recipe, and the folders and files the arguments name. Returns what
    was read, for parse_arguments and recipe/train.py to use instead of reading it again."""
    check_training_transformers()
    recipe, values, rest = split_recipe(argv)
    check_training_option_names(recipe, values, rest)
    check_recipe_types(recipe, values)
    options = raw_options(values, rest)
    _check_training_values(options, recipe, rest)
    model = options.get("model_name_or_path")
    if model:
        needs_tokenizer = not options.get("tokenizer_name_or_path")  # the model's own tokenizer is used
        check_model_dir(model, "--model_name_or_path", needs_tokenizer=needs_tokenizer)
    else:
        check_preset(options.get("preset"))
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
    check_data_files(options)
    check_output_dir(options.get("output_dir"), "--output_dir")
    resume = options.get("resume_from_checkpoint")
    if resume and resume not in ("True", "true", "False", "false", "last", "None") and not Path(resume).is_dir():
        raise UsageError(f"--resume_from_checkpoint {resume}: no such checkpoint folder (or pass True for the last)")
    return TrainRequest(recipe=recipe, values=values, argv=tuple(rest), checked_model=model)


# ---- the parser (imports transformers, and with it torch) -----------------------------------------------------------


@cache
def _train_argument_parser_class() -> type:
    """The class of vaswani-train's parser, made on first use: HfArgumentParser cannot be imported without torch."""
    from transformers import HfArgumentParser

    class _TrainArgumentParser(HfArgumentParser):
        """HfArgumentParser whose errors are UsageErrors (one line) and that names the recipe a bad value came from."""

        recipe: Path | None = None
        recipe_keys: frozenset[str] = frozenset()
        command_line: tuple[str, ...] = ()

        def error(self, message: str):
            option = message.split(":", 1)[0].removeprefix("argument ").split("/")[0].strip()
            name = option.removeprefix("--")
            from_recipe = name in self.recipe_keys and not any(t.split("=")[0] == option for t in self.command_line)
            where = f"{self.recipe}: key {name!r}: " if from_recipe else ""
            raise UsageError(f"{where}{message} (see vaswani-train --help)")

    return _TrainArgumentParser


def __getattr__(name: str):
    """`_TrainArgumentParser`, the class, is made when first asked for (PEP 562), so importing this module stays
    torch-free."""
    if name == "_TrainArgumentParser":
        return _train_argument_parser_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _unknown_recipe_keys_message(recipe: Path, unknown: list[str], known: set[str]) -> str:
    names = sorted(option.removeprefix("--") for option in known if option.startswith("--"))
    close = difflib.get_close_matches(unknown[0], names, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else "; vaswani-train --help lists the valid names"
    more = f" (also unknown: {', '.join(unknown[1:])})" if len(unknown) > 1 else ""
    return f"{recipe}: unknown key {unknown[0]!r}{more}{hint}"


def parse_arguments(
    argv: Sequence[str] | TrainRequest | None = None,
) -> tuple[ModelArguments, DataArguments, VaswaniTrainingArguments]:
    """`[RECIPE] [--option value ...]`: RECIPE is a JSON/YAML file or the name of a shipped recipe (toy, multi30k);
    options after it override its values. Options are matched exactly (no prefixes: a recipe's "max_step" is an
    error, not max_steps), and every mistake is a UsageError naming the recipe file or the option. A TrainRequest
    (preflight_train's reading of the same arguments) is used as it is, not read again."""
    from ..data.arguments import DataArguments
    from .arguments import ModelArguments, VaswaniTrainingArguments

    request = argv if isinstance(argv, TrainRequest) else as_request(sys.argv[1:] if argv is None else argv)
    recipe, values, rest = request.recipe, request.values, list(request.argv)
    parser = _train_argument_parser_class()(
        (ModelArguments, DataArguments, VaswaniTrainingArguments), prog="vaswani-train", allow_abbrev=False
    )
    parser.recipe, parser.recipe_keys, parser.command_line = recipe, frozenset(values), tuple(rest)
    known = set(parser._option_string_actions)  # every spelling the parser accepts, aliases and --no_* included
    unknown = [key for key in values if f"--{key}" not in known]
    if unknown:
        raise UsageError(_unknown_recipe_keys_message(recipe, unknown, known))
    try:
        *arguments, remaining = parser.parse_args_into_dataclasses(
            args=recipe_to_argv(values) + rest, return_remaining_strings=True
        )
    except UsageError:
        raise
    except ValueError as error:  # the dataclasses' own checks (ours and Seq2SeqTrainingArguments')
        raise UsageError(f"{error_line(error)} (see vaswani-train --help)") from error
    if remaining:
        raise UsageError(unknown_options_message(remaining, known, where="") + " (see vaswani-train --help)")
    return tuple(arguments)
