"""Upload a trained model folder to the Hugging Face Hub, as `vaswani-train` wrote it.

    vaswani-push MODEL_DIR REPO_ID [--private] [--revision BRANCH] [--commit-message MSG]
                                   [--token TOKEN] [--create-pr] [--dry-run] [--verbose]

What goes up: the weights, `config.json` (with `auto_map`), `generation_config.json` (the paper's decoding), the
code files it names (`configuration_vaswani.py`, `modeling_vaswani.py`, so `trust_remote_code=True` works where
hf_vaswani is not installed), the tokenizer files, the model card `README.md` and `results.json`, byte for byte as
training wrote them. What stays behind: `checkpoint-*/` (optimizer states), `.averaged/`, `runs/` (TensorBoard
logs), `training_args.bin` and other Trainer state, hidden files.

The folder is validated first, without touching the network, the cheap checks before the weights load: a model card
whose YAML metadata parses, the code files its `auto_map` names, a tokenizer whose size and fingerprint agree with
config.json (read from the files: a foreign tokenizer is one line before any weights load), then it must load with
`AutoModelForSeq2SeqLM` and `AutoTokenizer` with no missing or unexpected weights. The command logs warnings only;
`--verbose` adds its own and the libraries' INFO logs. Then one commit is made with `HfApi.create_commit` (what `upload_folder` does
without Xet, here with an explicit list of files, which also allows `--create-pr` against a branch). The token
comes from `--token`, else `HF_TOKEN` or `hf auth login`; the Hub from `HF_ENDPOINT`.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from ..console import setup_logging
from ..usage import (
    WEIGHT_FILES,
    ArgumentParser,
    UsageError,
    check_safetensors,
    error_line,
    non_finite_weights_problem,
    tokenizer_file_problem,
    tokenizer_problem,
)
from .loading import weights_shape_problem

logger = logging.getLogger(__name__)

# Folders and files of a training output folder that are not part of the model.
EXCLUDED_DIRS = ("checkpoint-*", ".averaged", "runs", "__pycache__", ".*")
EXCLUDED_FILES = (
    "training_args.bin",  # a pickle of the TrainingArguments, written by the Trainer's own Hub pushes
    "trainer_state.json",
    "optimizer.pt",
    "scheduler.pt",
    "scaler.pt",
    "rng_state*.pth",
    "*.lock",
    ".*",
)


class ModelFolderError(UsageError):
    """The folder given to `vaswani-push` is not a complete, loadable hf-vaswani model folder."""


@dataclass
class PushResult:
    repo_id: str
    repo_url: str
    commit_url: str
    commit_oid: str
    pr_url: str | None
    files: list[str]


# ---- what to upload -------------------------------------------------------------------------------------------------


def files_to_push(folder: str | Path) -> list[str]:
    """The paths (relative, POSIX) of the files of `folder` that make up the model, sorted."""
    folder = Path(folder)
    selected = []
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if not path.is_file():
            continue
        if any(fnmatch.fnmatch(part, pattern) for part in relative.parts[:-1] for pattern in EXCLUDED_DIRS):
            continue
        if any(fnmatch.fnmatch(path.name, pattern) for pattern in EXCLUDED_FILES):
            continue
        selected.append(relative.as_posix())
    return selected


def read_card_metadata(card: Path) -> dict:
    """The YAML front matter of a model card; raises ModelFolderError if it is missing or does not parse."""
    import yaml

    text = card.read_text(encoding="utf-8")
    if not text.startswith("---"):
        raise ModelFolderError(f"{card}: the model card has no YAML metadata block (a first line '---')")
    try:
        _, block, _ = text.split("---", 2)
        metadata = yaml.safe_load(block)
    except (ValueError, yaml.YAMLError) as error:
        raise ModelFolderError(f"{card}: the model card's YAML metadata does not parse: {error}") from error
    if not isinstance(metadata, dict):
        raise ModelFolderError(f"{card}: the model card's YAML metadata is not a mapping")
    return metadata


def validate_model_folder(folder: str | Path, load: bool = True) -> list[str]:
    """Check that `folder` is a trained hf-vaswani model folder and return the files to upload.

    The checks that read only files (config.json, the card, the code files, tokenizer.json against config.json's
    vocab_size and tokenizer fingerprint) come first; then, with `load` (the default), the model and tokenizer are
    loaded as the Auto classes will load them from the Hub. Raises ModelFolderError naming the folder and what is
    wrong.
    """
    folder = Path(folder)
    hint = "(expected the output folder of vaswani-train)"
    if not folder.is_dir():
        raise ModelFolderError(f"{folder} is not a folder {hint}")
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise ModelFolderError(f"{folder} is not a model folder: it has no config.json {hint}")
    if not any((folder / name).is_file() for name in WEIGHT_FILES):
        raise ModelFolderError(f"{folder} is not a model folder: it has no weights ({', '.join(WEIGHT_FILES)})")
    if (folder / "model.safetensors").is_file():
        check_safetensors(folder / "model.safetensors")  # a truncated upload would be worse than none
    pickles = [name for name in ("pytorch_model.bin", "pytorch_model.bin.index.json") if (folder / name).is_file()]
    if pickles:  # torch's own refusal would advise weights_only=False, which runs whatever the pickle holds
        raise ModelFolderError(
            f"{folder / pickles[0]}: the weights are a pickle, which runs code when loaded; convert them to "
            "model.safetensors (safetensors.torch.save_file of the state dict, on a machine you trust, or save the "
            "model with save_pretrained) and remove the .bin before pushing"
        )
    card = folder / "README.md"
    if not card.is_file():
        raise ModelFolderError(
            f"{folder} has no model card README.md: vaswani-train writes it at the end of a run "
            "(hf_vaswani_training.recipe.model_card.write_model_card); a folder without one would appear on the Hub undocumented"
        )
    read_card_metadata(card)

    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelFolderError(f"{config_path}: not a readable JSON config ({error_line(error)})") from error
    if not isinstance(config, dict):
        raise ModelFolderError(f"{config_path}: not a JSON object")
    auto_map = config.get("auto_map") or {}
    if "AutoModelForSeq2SeqLM" not in auto_map:
        raise ModelFolderError(
            f"{config_path} has no auto_map entry for AutoModelForSeq2SeqLM: the model was saved without its code, "
            "so trust_remote_code=True could not load it. Save it with hf_vaswani imported."
        )
    for reference in auto_map.values():
        for name in reference if isinstance(reference, list) else [reference]:
            if name is None:
                continue
            module = name.split("--")[-1].rsplit(".", 1)[0]
            if not (folder / f"{module}.py").is_file():
                raise ModelFolderError(f"{folder}: config.json's auto_map names {name} but {module}.py is missing")
    if not ((folder / "tokenizer.json").is_file() or (folder / "tokenizer_config.json").is_file()):
        raise ModelFolderError(f"{folder} has no tokenizer (tokenizer.json / tokenizer_config.json)")
    if (folder / "tokenizer.json").is_file():
        # The tokenizer against config.json (size, fingerprint) from the files alone, before any weights load: a
        # foreign tokenizer is named in one line in a second, not after the model is read.
        problem = tokenizer_file_problem(folder, config)
        if problem is not None:
            raise ModelFolderError(problem)

    if load:
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        import hf_vaswani  # noqa: F401  (registers the Auto classes; the folder's own code is checked on download)

        problem = weights_shape_problem(str(folder))  # transformers' own answer is a table and a RuntimeError
        if problem is not None:
            raise ModelFolderError(problem)
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder)
            model, info = AutoModelForSeq2SeqLM.from_pretrained(folder, output_loading_info=True)
        except (OSError, ValueError, KeyError) as error:
            raise ModelFolderError(f"{folder} does not load as a model and tokenizer: {error}") from error
        problems = {key: value for key, value in info.items() if value and key != "error_msgs"}
        if problems or info.get("error_msgs"):
            raise ModelFolderError(f"{folder}: the weights do not match the config: {problems or info['error_msgs']}")
        source = str(folder)
        problem = non_finite_weights_problem(model, source) or tokenizer_problem(tokenizer, model.config, source)
        if problem is not None:  # a broken model must not reach the Hub
            raise ModelFolderError(problem)
        if len(tokenizer) > model.config.vocab_size:
            raise ModelFolderError(
                f"{folder}: the tokenizer has {len(tokenizer)} tokens but the model's vocab_size is "
                f"{model.config.vocab_size}"
            )
    files = files_to_push(folder)
    logger.info("%s: %d files to upload: %s", folder, len(files), ", ".join(files))
    return files


# ---- the upload -----------------------------------------------------------------------------------------------------


def _commit_description(folder: Path) -> str:
    results = folder / "results.json"
    try:
        run = json.loads(results.read_text(encoding="utf-8"))
        scores = run["results"]["test"]
        return f"test sacreBLEU {scores['bleu']:.2f}, chrF {scores['chrf']:.2f} ({scores['bleu_signature']})"
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def push_model_folder(
    folder: str | Path,
    repo_id: str,
    *,
    private: bool | None = None,
    revision: str | None = None,
    commit_message: str | None = None,
    token: str | None = None,
    create_pr: bool = False,
    validate: bool = True,
) -> PushResult:
    """Validate `folder` and upload its model files to `repo_id` in one commit (creating the repo if needed).

    `revision` is a branch (created from main if missing) or `refs/pr/N`; with `create_pr` the commit opens a pull
    request against `revision` (default main) instead of landing on it.
    """
    folder = Path(folder)
    files = validate_model_folder(folder) if validate else files_to_push(folder)
    try:
        return _push(folder, files, repo_id, private, revision, commit_message, token, create_pr)
    except Exception as error:
        problem = network_problem(error)
        if problem is None:
            raise
        raise UsageError(f"{repo_id}: {problem}; nothing was uploaded (run the command again when it is)") from None


def network_problem(error: BaseException) -> str | None:
    """'cannot reach the Hub at HOST (reason)' when `error` (or what caused it) is a connection failure, a DNS
    failure or a timeout; None for anything else (an HTTP answer such as 401 or 404 is the Hub's, not the network's)."""
    import socket
    from urllib.parse import urlsplit

    from huggingface_hub import constants

    causes, seen = [], error
    while seen is not None and len(causes) < 20:
        causes.append(seen)
        seen = seen.__cause__ or seen.__context__
    transport = any(c.__name__ in ("TransportError", "ConnectionError") for e in causes for c in type(e).__mro__)
    reasons = [e for e in causes if isinstance(e, ConnectionError | socket.gaierror | TimeoutError)]
    if not (transport or reasons):
        return None
    host = urlsplit(constants.ENDPOINT).netloc or constants.ENDPOINT
    reason = reasons[-1] if reasons else causes[-1]
    detail = getattr(reason, "strerror", None) or str(reason) or type(reason).__name__
    if isinstance(reason, socket.gaierror):
        detail = f"its name does not resolve: {detail}"
    return f"cannot reach the Hub at {host} ({detail}); check the network connection and HF_ENDPOINT"


def _push(folder, files, repo_id, private, revision, commit_message, token, create_pr) -> PushResult:
    from huggingface_hub import CommitOperationAdd, HfApi

    api = HfApi(token=token, library_name="hf-vaswani")
    repo_url = api.create_repo(repo_id, private=private, exist_ok=True)
    repo_id = repo_url.repo_id
    if revision and revision != "main" and not revision.startswith("refs/pr/"):
        api.create_branch(repo_id, branch=revision, exist_ok=True)
    operations = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=folder / name) for name in files]
    info = api.create_commit(
        repo_id,
        operations,
        commit_message=commit_message or f"Upload {folder.name} with hf-vaswani (python -m training.push)",
        commit_description=_commit_description(folder),
        revision=revision,
        create_pr=create_pr,
    )
    url = str(repo_url)
    if revision and revision != "main" and not create_pr:
        url = f"{url}/tree/{revision}"
    return PushResult(repo_id, url, info.commit_url, info.oid, info.pr_url, files)


# ---- command line ---------------------------------------------------------------------------------------------------


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = ArgumentParser(
        prog="vaswani-push",
        description="Upload a trained hf-vaswani model folder (weights, config, code, tokenizer, card) to the Hub.",
    )
    parser.add_argument("model_dir", type=Path, help="The output folder of vaswani-train.")
    parser.add_argument("repo_id", help="The Hub repository, e.g. your-name/vaswani-base-wmt14-en-de.")
    parser.add_argument("--private", action="store_true", help="Create the repository as private (if it is new).")
    parser.add_argument(
        "--revision", "--branch", dest="revision", default=None, help="Branch to push to (created from main if new)."
    )
    parser.add_argument("--commit-message", "--commit_message", dest="commit_message", default=None)
    parser.add_argument(
        "--token", default=None, help="A Hub token with write access (default: HF_TOKEN or `hf auth login`)."
    )
    parser.add_argument(
        "--create-pr", "--create_pr", dest="create_pr", action="store_true", help="Open a pull request instead."
    )
    parser.add_argument("--dry-run", "--dry_run", dest="dry_run", action="store_true", help="Validate and list only.")
    parser.add_argument(
        "--verbose", action="store_true", help="Show INFO logs, the libraries' included (default: warnings and errors)."
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> PushResult | None:
    """Validate and upload as the command line says. A user error raises UsageError (a ModelFolderError for the
    folder); vaswani-push prints it as one line and exits with status 2."""
    args = parse_arguments(argv)
    # training/console.py: the commands' one log format; libraries (and this command) at warnings unless --verbose
    setup_logging(args.verbose, level=logging.INFO if args.verbose else logging.WARNING)
    files = validate_model_folder(args.model_dir)
    if args.dry_run:
        print(f"{args.model_dir} is a valid model folder; would upload {len(files)} files to {args.repo_id}:")
        print("\n".join(f"  {name}" for name in files))
        return None

    from huggingface_hub import get_token

    if args.token is None and get_token() is None:
        raise UsageError("no Hugging Face token: pass --token, set HF_TOKEN or run `hf auth login`")
    result = push_model_folder(
        args.model_dir,
        args.repo_id,
        private=args.private or None,
        revision=args.revision,
        commit_message=args.commit_message,
        token=args.token,
        create_pr=args.create_pr,
        validate=False,  # done above
    )
    print(f"Uploaded {len(result.files)} files to {result.repo_id}: {', '.join(result.files)}")
    print(f"commit: {result.commit_url}")
    if result.pr_url:
        print(f"pull request: {result.pr_url}")
    print(result.repo_url)
    return result
