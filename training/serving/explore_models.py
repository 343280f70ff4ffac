"""The attention explorer's models: which are loaded in this process (a few, the served one pinned), which a visitor
may load (the operator's `LoadPolicy`), and loading one with a one-line error. Needs no torch until a model loads.
explore.py puts them on a page.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..usage import UsageError, check_loaded_model, check_model_dir, looks_like_local_path

logger = logging.getLogger(__name__)


# ---- the model ------------------------------------------------------------------------------------------------------


def model_problem(source: str) -> str | None:
    """Why `source` cannot be a model folder, in one line; None if it may be one (a local folder that has the files
    of a saved seq2seq model, or a Hub repository id, which is only checked by loading it). Needs no torch."""
    source = source.strip()
    if not source:
        return "no model given: type a model folder (e.g. outputs/toy) or a Hub repository id"
    path = Path(source).expanduser()
    if not path.exists() and not looks_like_local_path(source):
        return None  # maybe a Hub repository id
    config_file = path / "config.json"
    try:
        config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else None
    except (OSError, ValueError):
        config = None  # check_model_dir names the problem
    if isinstance(config, dict) and not config.get("is_encoder_decoder", config.get("model_type") == "vaswani"):
        return f"{config_file}: model_type {config.get('model_type', 'unknown')!r} is not an encoder-decoder model"
    try:
        check_model_dir(source, "model", hub_allowed=False, needs_tokenizer=True)
    except UsageError as error:
        return str(error)
    return None


# The example sentence by source language, where the model folder has none of its own (a Multi30k-like caption).
EXAMPLES = {
    "en": "A little girl climbs into a wooden playhouse .",
    "de": "Ein kleines Mädchen klettert in ein Spielhaus aus Holz .",
    "fr": "Une petite fille grimpe dans une maisonnette en bois .",
}


def example_sentence(source: str) -> str:
    """The sentence the page starts with, in the model's source language: the first test sentence its training run
    recorded (results.json's samples, vaswani-train), else the example of its source language (results.json's
    source_lang, or the model card's first `language`) from `EXAMPLES`, else none: a sentence in the wrong language
    would show the model at its worst and teach the visitor nothing."""
    folder = Path(source).expanduser()
    results = _json_file(folder / "results.json")
    samples = results.get("samples") or []
    if samples and isinstance(samples[0], dict) and str(samples[0].get("source") or "").strip():
        return str(samples[0]["source"]).strip()
    language = results.get("source_lang") or _card_language(folder / "README.md")
    return EXAMPLES.get(str(language or "").split("-")[0].lower(), "")


def _json_file(path: Path) -> dict:
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return values if isinstance(values, dict) else {}


def _card_language(card: Path) -> str | None:
    """The first `language` of a model card's YAML block (vaswani-train writes the source language first)."""
    try:
        lines = card.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    if not lines or lines[0].strip() != "---":
        return None
    for index, line in enumerate(lines[1:], 1):
        if line.strip() == "---":
            return None
        if line.startswith("language:"):
            value = line.split(":", 1)[1].strip()
            if value:
                return value.strip("[]'\" ").split(",")[0].strip("'\" ")
            following = lines[index + 1] if index + 1 < len(lines) else ""
            return following.strip().lstrip("-").strip().strip("'\"") or None
    return None


@dataclass
class Explorer:
    """A loaded model and tokenizer, with what the page needs to know about them."""

    source: str
    model: Any
    tokenizer: Any
    max_source_tokens: int
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def config(self):
        return self.model.config


class ModelShelf:
    """The models loaded in this process, most recently used last. Pinned ones (the model a page serves) never leave;
    of the others only the `capacity` most recently used stay in memory."""

    def __init__(self, capacity: int = 1):
        self.capacity = capacity
        self.models: OrderedDict[str, Explorer] = OrderedDict()
        self.pinned: set[str] = set()
        self.lock = threading.Lock()

    def get(self, source: str) -> Explorer | None:
        return self.models.get(source.strip()) if source else None

    def keep(self, explorer: Explorer, pin: bool) -> None:
        self.models[explorer.source] = explorer
        self.models.move_to_end(explorer.source)
        if pin:
            self.pinned.add(explorer.source)
        unpinned = [source for source in self.models if source not in self.pinned]
        for source in unpinned[: max(len(unpinned) - self.capacity, 0)]:
            del self.models[source]


SHELF = ModelShelf()


@dataclass(frozen=True)
class LoadPolicy:
    """Which models a visitor may load from the page's Load box (the served model is always there).

    `anything`: any folder or Hub id (a page on a loopback address, whose only visitor is its operator). Otherwise
    only what `patterns` names: a folder (and the folders inside it, after resolving `..` and links), a Hub id, or
    an fnmatch pattern of either (`/srv/models/*`, `your-name/*`). No patterns: loading is off."""

    patterns: tuple[str, ...] = ()
    anything: bool = False

    def allows(self, source: str) -> bool:
        source = source.strip()
        if self.anything:
            return True
        if not source or "\0" in source:
            return False
        if looks_like_local_path(source) or Path(source).expanduser().exists():
            path = str(Path(source).expanduser().resolve())
            for pattern in filter(_is_path_pattern, self.patterns):
                allowed = str(Path(pattern).expanduser().resolve())
                if fnmatch.fnmatchcase(path, allowed) or path == allowed or path.startswith(allowed.rstrip("/") + "/"):
                    return True
            return False
        return any(fnmatch.fnmatchcase(source, p) for p in self.patterns if not _is_path_pattern(p))

    def refusal(self, source: str) -> str:
        """The answer to a name it does not allow: the same whatever the name is, so it tells nothing of the disk."""
        if not self.patterns:
            return "loading other models is off on this server (its operator can allow some: --allow-load, VASWANI_ALLOW_LOAD)"
        return f"{source.strip()}: not among the models this server may load (its operator lists them)"


def _is_path_pattern(pattern: str) -> bool:
    return looks_like_local_path(pattern) or Path(pattern).expanduser().exists()


def load_explorer(source: str, *, pin: bool = False, shelf: ModelShelf | None = None) -> Explorer:
    """Load (once per process) the model and tokenizer of a folder or Hub id; UsageError with one line if not.
    `pin`: it stays in memory for good (the model a page serves)."""
    shelf = SHELF if shelf is None else shelf
    source = source.strip()
    problem = model_problem(source)
    if problem is not None:
        raise UsageError(problem)
    with shelf.lock:
        explorer = shelf.get(source)
        if explorer is None:
            explorer = _load(source)
            logger.info("Loaded %s", source)
        shelf.keep(explorer, pin)
        return explorer


def _load(source: str) -> Explorer:
    import transformers
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    import hf_vaswani  # noqa: F401  (registers the Auto classes)

    transformers.utils.logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = AutoModelForSeq2SeqLM.from_pretrained(source).eval()
    except Exception as error:  # OSError, ValueError, hub errors: all reach the user as one line
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UsageError(f"cannot load {source} as a translation model: {first_line}") from None
    check_loaded_model(model, tokenizer, source)  # NaN weights, another model's tokenizer: refused, not garbage
    limits = [getattr(model.config, "max_position_embeddings", None), tokenizer.model_max_length]
    # Tokenizers without a limit report a huge sentinel (int(1e30)); the positions the model trained on are the
    # real bound (§3.5: the formula extrapolates, the trained weights need not).
    max_source_tokens = min(int(limit) for limit in limits if limit and limit < 1_000_000)
    return Explorer(source, model, tokenizer, max_source_tokens)
