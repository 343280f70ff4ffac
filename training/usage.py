"""The ground floor of every command: the user-error contract, the argument parser and types, and the checks of
files and model folders that need no torch.

A mistake of the user's (a wrong option, a missing or corrupted file, bad data) is a `UsageError`: the command prints
it as ONE line on standard error, naming the file/line/option, what is wrong and how to fix it, and exits with status
2 (argparse's own status for bad arguments). Any other exception is a bug and shows its traceback. `--debug` (any
command) or `HF_VASWANI_DEBUG=1` shows the traceback of user errors too.

Exit status: 0 success; 1 the work ran but a check it was asked for failed (`vaswani-export --check` with tokens
that differ); 2 a user error (one line on stderr); 130 interrupted; anything else a bug.

This module imports only the standard library at its top, and imports nothing of this package: every other module
may import it, and each command's checks (vaswani-train's in recipe/options.py, the others' in their own modules)
run with it before torch, transformers, datasets or gradio load.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import logging
import math
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

EXIT_FAILED_CHECK = 1
EXIT_USAGE = 2
DEBUG_ENV = "HF_VASWANI_DEBUG"
# What `from_pretrained` accepts as weights; a model folder needs one of them.
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
MODEL_TYPE = "vaswani"  # hf_vaswani's VaswaniConfig.model_type (tests check they agree)
# Names of files vaswani-train writes into a model folder (data/tokenizer.py and recipe/train.py write them). Hidden:
# the trained-with record is not part of the model on the Hub; a later run reuses the tokenizer beside it only when
# its own options agree (recipe/train.py, check_saved_tokenizer).
TRAINED_WITH_FILE = ".tokenizer_trained_with.json"
RESULTS_FILE = "results.json"
# config.json's record of the tokenizer a model was trained with (vaswani-train writes it, see tokenizer_fingerprint).
# In config.json rather than the trained-with record: config.json goes wherever the model goes (checkpoints, averaged
# folders, the Hub, remote code, which keeps unknown config keys), the hidden record does not.
TOKENIZER_FINGERPRINT_KEY = "tokenizer_fingerprint"
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


def int_in(low: int, high: int, why: str = "") -> Callable[[str], int]:
    """An argparse type: an integer from `low` to `high`, both included; `why` (", the ...") ends the message."""

    def parse(value: str) -> int:
        number = _int_at_least(low, f"must be from {low} to {high}{why}")(value)
        if number > high:
            raise argparse.ArgumentTypeError(f"{value} must be from {low} to {high}{why}")
        return number

    return parse


positive_int = _int_at_least(1, "must be a positive integer (1 or more)")
non_negative_int = _int_at_least(0, "must be 0 or more")


def number_problem(
    number: float,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> str | None:
    """Why `number` is not a finite number in the range (low, high bounds; open ends excluded), or None."""
    if not math.isfinite(number):
        return "must be a finite number"
    too_low = low is not None and (number <= low if low_open else number < low)
    too_high = high is not None and (number >= high if high_open else number > high)
    if not (too_low or too_high):
        return None
    if high is None:
        return f"must be above {low:g}" if low_open else f"must be {low:g} or more"
    if low is None:
        return f"must be below {high:g}" if high_open else f"must be {high:g} or less"
    return f"must be in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"


def float_in(
    low: float | None = None, high: float | None = None, *, low_open: bool = False, high_open: bool = False
) -> Callable[[str], float]:
    """An argparse type: a finite float within the bounds (None: unbounded; `*_open`: the bound itself excluded).
    nan and inf are refused: they pass every comparison argparse would make and change results silently."""

    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
        problem = number_problem(number, low, high, low_open=low_open, high_open=high_open)
        if problem is not None:
            raise argparse.ArgumentTypeError(f"{value} {problem}")
        return number

    return parse


finite_float = float_in()
positive_float = float_in(0, low_open=True)


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


# What a pickled PyTorch state dict may name (torch.load(weights_only=True) allows these and a few more): tensors,
# storages and the containers they come in. Anything else can run code when unpickled.
_SAFE_PICKLE_MODULES = ("torch", "collections", "builtins", "_codecs", "numpy.core.multiarray", "numpy")
_PICKLE_STRINGS = ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING", "BINSTRING")


def pickle_problem(path: Path) -> str | None:
    """Why the pickled weights in `path` would be refused by torch's weights_only loader (a callable other than
    tensors' and containers', e.g. os.system), or None. Reads the pickle's opcodes with the standard library, without
    running it, so the answer is one line before torch loads instead of torch's UnpicklingError traceback."""
    import pickletools
    import zipfile

    try:
        if zipfile.is_zipfile(path):  # torch.save's format: ARCHIVE/data.pkl beside the tensor data
            with zipfile.ZipFile(path) as archive:
                name = next((n for n in archive.namelist() if n.endswith("data.pkl")), None)
                data = archive.read(name) if name else b""
        else:
            data = path.read_bytes()
        strings: list[str] = []
        for opcode, argument, _ in pickletools.genops(data):
            if opcode.name in _PICKLE_STRINGS:
                strings.append(str(argument))
            elif opcode.name in ("GLOBAL", "INST", "STACK_GLOBAL"):
                module, name = argument.split(" ", 1) if opcode.name != "STACK_GLOBAL" else strings[-2:]
                if module.split(".")[0] not in {m.split(".")[0] for m in _SAFE_PICKLE_MODULES} or (
                    module == "builtins" and name not in ("set", "frozenset", "dict", "list", "tuple", "bytearray")
                ):
                    return (
                        f"{path}: refused: the pickle would call {module}.{name} when loaded, which can run any code; "
                        "use the model's model.safetensors, or convert this file on a machine you trust"
                    )
    except (OSError, ValueError, IndexError, KeyError, zipfile.BadZipFile) as error:
        return f"{path}: not a readable PyTorch weights file ({type(error).__name__}); save the model again"
    return None


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
        config_values = json.loads(config.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UsageError(f"{config}: not valid JSON ({error}); save the model again") from None
    check_model_type(config_values, config)
    weights = [name for name in WEIGHT_FILES if (path / name).is_file()]
    if not weights:
        raise UsageError(f"{option} {value}: the folder has no weights ({', '.join(WEIGHT_FILES[:2])}, ...)")
    if weights[0] == "model.safetensors":
        check_safetensors(path / "model.safetensors")
    elif weights[0] == "pytorch_model.bin":
        problem = pickle_problem(path / "pytorch_model.bin")
        if problem is not None:
            raise UsageError(problem)
    if needs_tokenizer and not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        raise UsageError(
            f"{option} {value}: the folder has no tokenizer (tokenizer.json); save the tokenizer with the model "
            "(tokenizer.save_pretrained(folder)), as vaswani-train does"
        )
    if (path / "tokenizer.json").is_file():
        problem = tokenizer_file_problem(path, config_values)
        if problem is not None:
            raise UsageError(problem)


# ---- the tokenizer a model was trained with ---------------------------------------------------------------------------


def tokenizer_fingerprint(tokenizer_json: dict) -> str:
    """A fingerprint of the vocabulary and merges in a tokenizer.json (its JSON, as a dict): the SHA-256 of the
    canonical token -> id mapping (the model's vocabulary and the added tokens, sorted by id) and the merges list, so
    that saving the same tokenizer again, which may reorder keys or change the merges' spelling ("a b" or ["a", "b"]),
    keeps it, while another run's tokenizer of the same size (other ids, other merges) does not."""
    model = tokenizer_json.get("model") or {}
    vocab = model.get("vocab")
    if isinstance(vocab, dict):
        pairs = {(str(token), int(token_id)) for token, token_id in vocab.items()}
    elif isinstance(vocab, list):  # Unigram: [piece, score] by id
        pairs = {(str(entry[0] if isinstance(entry, list) else entry), index) for index, entry in enumerate(vocab)}
    else:
        pairs = set()
    pairs |= {(str(token["content"]), int(token["id"])) for token in tokenizer_json.get("added_tokens") or []}
    merges = [merge.split(" ", 1) if isinstance(merge, str) else list(merge) for merge in model.get("merges") or []]
    canonical = {
        "type": model.get("type"),
        "tokens": sorted(pairs, key=lambda pair: (pair[1], pair[0])),
        "merges": merges,
    }
    text = json.dumps(canonical, ensure_ascii=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def loaded_tokenizer_fingerprint(tokenizer) -> str | None:
    """tokenizer_fingerprint of a loaded fast tokenizer (its Rust backend as tokenizer.json); None for one without."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return tokenizer_fingerprint(json.loads(backend.to_str())) if backend is not None else None


def _fingerprint_problem(found: str | None, recorded: object, tokenizer_file: str, config_file: str, fix: str):
    if not isinstance(recorded, str):
        logging.getLogger(__name__).debug(
            "%s records no %s (trained before it was recorded): the tokenizer's ids are not checked",
            config_file,
            TOKENIZER_FINGERPRINT_KEY,
        )
        return None
    if found is None or found == recorded:
        return None
    return (
        f"{tokenizer_file} is another tokenizer than the model's: its vocabulary and merges have fingerprint "
        f"{found[:23]} but {config_file} says the model was trained with {TOKENIZER_FINGERPRINT_KEY} {recorded[:23]} "
        f"(same size, other ids: it would translate to garbage); {fix}"
    )


def _token_count_problem(tokens: int, vocab_size: int, record: dict | None, tokenizer_file, config_file, folder, fix):
    if record is not None and isinstance(record.get("tokens"), int) and record["tokens"] != tokens:
        return (
            f"{tokenizer_file} has {tokens} tokens but {folder / TRAINED_WITH_FILE} records {record['tokens']} for "
            f"the tokenizer trained with this model; {fix}"
        )
    padded = vocab_size % 8 == 0 and vocab_size - tokens < 128 and record is None
    if tokens > vocab_size or (tokens < vocab_size and not padded):
        return f"{tokenizer_file} has {tokens} tokens but {config_file} says vocab_size {vocab_size}; {fix}"
    return None


_NOT_THIS_MODELS = "the tokenizer is not this model's: put the tokenizer files the model was trained with beside it"


def tokenizer_file_problem(folder: Path, config_values: dict) -> str | None:
    """The checks of tokenizer_problem that need only the files (config.json, tokenizer.json and the trained-with
    record are JSON): the number of tokens and the fingerprint, answered before torch loads. None when they agree."""
    tokenizer_file, config_file = folder / "tokenizer.json", folder / "config.json"
    try:
        tokenizer_json = json.loads(tokenizer_file.read_text(encoding="utf-8"))
    except OSError as error:
        return f"{tokenizer_file}: cannot be read ({error.strerror})"
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        return f"{tokenizer_file}: not valid JSON ({error_line(error)}); save the tokenizer with the model again"
    try:
        found = tokenizer_fingerprint(tokenizer_json)
        model = tokenizer_json.get("model") or {}
        vocab = model.get("vocab")
        ids = set(vocab.values()) if isinstance(vocab, dict) else set(range(len(vocab or [])))
        ids |= {token["id"] for token in tokenizer_json.get("added_tokens") or []}
    except (AttributeError, KeyError, TypeError, ValueError):
        return f"{tokenizer_file}: not a tokenizer file (no vocabulary in it); save the tokenizer with the model again"
    vocab_size = config_values.get("vocab_size")
    if isinstance(vocab_size, int) and ids:
        record = _json_or_none(folder / TRAINED_WITH_FILE)
        problem = _token_count_problem(
            len(ids), vocab_size, record, tokenizer_file, config_file, folder, _NOT_THIS_MODELS
        )
        if problem is not None:
            return problem
    recorded = config_values.get(TOKENIZER_FINGERPRINT_KEY)
    return _fingerprint_problem(found, recorded, str(tokenizer_file), str(config_file), _NOT_THIS_MODELS)


# ---- checks of a loaded model (duck-typed: the model and tokenizer come in loaded, torch is not imported here) ----------


def model_file(source: str, names: Sequence[str]) -> str:
    """How an error names a file of the model `source` (a folder or a Hub id): the first of `names` the folder
    has, else the first name (a Hub repository, or a folder holding none of them)."""
    folder = Path(source).expanduser()
    found = next((name for name in names if (folder / name).is_file()), names[0]) if folder.is_dir() else names[0]
    return str(folder / found) if folder.is_dir() else f"{source}/{found}"


def non_finite_weights_problem(model, source: str) -> str | None:
    """Why the loaded `model`'s weights cannot translate (NaN or infinite values: what a diverged run saves, and
    what then translates every sentence to an empty line), or None. One pass of isfinite over the parameters."""
    broken = []  # (parameter name, non-finite values, values)
    for name, parameter in model.named_parameters():
        finite = parameter.detach().isfinite()
        if not bool(finite.all()):
            broken.append((name, finite.numel() - int(finite.sum()), finite.numel()))
    if not broken:
        return None
    name, bad, total = broken[0]
    more = f", and in {len(broken) - 1} more tensors" if len(broken) > 1 else ""
    return (
        f"{model_file(source, WEIGHT_FILES)}: {bad} of {total} weights are not finite (NaN/Inf) in {name}{more}; the "
        "model is broken (a diverged run?): use an earlier checkpoint, or train again with a lower --learning_rate"
    )


def tokenizer_problem(tokenizer, config, source: str) -> str | None:
    """Why `tokenizer` is not the one the model of `config` was trained with, or None: a vocabulary of another size
    than the config's vocab_size (smaller only by the rows of an embedding padded to a round size), special-token ids
    other than the config's, a vocabulary and merges other than the config's tokenizer_fingerprint (same size, other
    ids), or tokenizer files that differ from the record of how the folder's tokenizer was trained
    (TRAINED_WITH_FILE, written by vaswani-train) and the run's results.json."""
    tokenizer_file = model_file(source, ("tokenizer.json", "tokenizer_config.json"))
    config_file = model_file(source, ("config.json",))
    fix = _NOT_THIS_MODELS
    folder = Path(source).expanduser()
    record = _json_or_none(folder / TRAINED_WITH_FILE) if folder.is_dir() else None
    tokens, vocab_size = len(tokenizer), config.vocab_size
    problem = _token_count_problem(tokens, vocab_size, record, tokenizer_file, config_file, folder, fix)
    if problem is not None:
        return problem
    recorded = getattr(config, TOKENIZER_FINGERPRINT_KEY, None)
    if isinstance(recorded, str):
        problem = _fingerprint_problem(
            loaded_tokenizer_fingerprint(tokenizer), recorded, tokenizer_file, config_file, fix
        )
        if problem is not None:
            return problem
    eos_ids = config.eos_token_id if isinstance(config.eos_token_id, list) else [config.eos_token_id]
    for name, config_ids in (
        ("pad_token_id", [config.pad_token_id]),
        ("eos_token_id", eos_ids),
        ("bos_token_id", [config.bos_token_id]),
    ):
        token_id = getattr(tokenizer, name, None)
        if token_id is not None and None not in config_ids and token_id not in config_ids:
            config_value = config_ids[0] if len(config_ids) == 1 else config_ids
            return f"{tokenizer_file} has {name} {token_id} but {config_file} says {name} {config_value}; {fix}"
    start = getattr(config, "decoder_start_token_id", None)
    special_ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    if start is not None and special_ids and start not in special_ids:
        return (
            f"{config_file} says decoder_start_token_id {start}, which is no special token of {tokenizer_file} "
            f"(its special ids: {sorted(special_ids)}); {fix}"
        )
    results = _json_or_none(folder / RESULTS_FILE) if record is not None else None
    if results is not None:
        trained_with = {
            "vocab_size": (results.get("model_args") or {}).get("vocab_size"),
            "min_frequency": (results.get("model_args") or {}).get("bpe_min_frequency"),
            "source_lang": results.get("source_lang"),
            "target_lang": results.get("target_lang"),
        }
        for key, value in trained_with.items():
            if value is not None and key in record and record[key] != value:
                return (
                    f"{folder / TRAINED_WITH_FILE} says the tokenizer was trained with {key}={record[key]!r} but "
                    f"{folder / RESULTS_FILE} says the model was trained with {key}={value!r}; {fix}"
                )
    return None


def check_loaded_model(model, tokenizer, source: str) -> None:
    """Raise a UsageError (one line naming the files) when the model loaded from `source` has non-finite weights or
    `tokenizer` (None: not checked) does not match it. Call it right after from_pretrained, before any work."""
    problem = non_finite_weights_problem(model, source)
    if problem is None and tokenizer is not None:
        problem = tokenizer_problem(tokenizer, model.config, source)
    if problem is not None:
        raise UsageError(problem)


def _json_or_none(path: Path) -> dict | None:
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return values if isinstance(values, dict) else None


def check_model_type(config_values: object, config_file: Path | str) -> None:
    """config.json must describe a vaswani model: transformers would otherwise load another architecture, or answer
    a `model_type` it does not know with advice about trust_remote_code."""
    if not isinstance(config_values, dict):
        raise UsageError(f"{config_file}: not a model config (a JSON object with a model_type); save the model again")
    model_type = config_values.get("model_type")
    if model_type != MODEL_TYPE:
        what = f"model_type {model_type!r} is" if model_type is not None else "has no model_type, so it is"
        raise UsageError(f"{config_file}: {what} not a vaswani model (this tool serves hf-vaswani models)")


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
    _check_writable(path.parent, value, option)


def check_output_dir(value: str | None, option: str) -> None:
    if value is not None and Path(value).exists() and not Path(value).is_dir():
        raise UsageError(f"{option} {value}: is a file, not a folder; choose another {option}")
    if value is not None:
        folder = Path(value).absolute()
        while not folder.is_dir() and folder != folder.parent:
            folder = folder.parent  # the folder the run would create it in (a file on the way: the writer says so)
        _check_writable(folder, value, option)


def _check_writable(folder: Path, value: str, option: str) -> None:
    """A folder the command cannot write (read-only file system, no permission): one line before any work."""
    if not os.access(folder, os.W_OK | os.X_OK):
        reason = "read-only file system" if _read_only(folder) else "no permission to write there"
        raise UsageError(f"{option} {value}: cannot write in {folder} ({reason}); choose a writable folder")


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


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


def error_line(message: object) -> str:
    """An error message as the one line a command prints: every run of whitespace, line breaks included, one space."""
    return " ".join(str(message).split())


def run_command(prog: str, function: Callable[[list[str]], int | None], argv: Sequence[str] | None) -> int:
    """Run `function(argv)`; a UsageError becomes one line on stderr and exit status 2."""
    debug, args = _debug_requested(list(sys.argv[1:] if argv is None else argv))
    try:
        return function(args) or 0
    except UsageError as error:
        if debug:
            raise
        print(f"{prog}: error: {error_line(error)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
