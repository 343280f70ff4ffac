"""The words follow the code, and the documented commands work from a wheel.

(a) Every repository path, file and dotted module named in the Markdown files and in the docstrings and comments of
every Python file exists (files on disk; modules and the names they define read with `ast`, never imported).
(b) The fenced shell and Python blocks of README.md, docs/ and the Markdown shipped in the wheel name console
scripts, options (against each command's `--help`) and modules that the installed wheel has, never the
checkout-only `training.*`; a Python block defines what it uses. (c), slow: they run from an empty directory.
"""

from __future__ import annotations

import ast
import builtins
import functools
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11's tomllib")

# Folders at the repository root whose paths the words name.
PATH_ROOTS = ("hf_vaswani", "training", "tests", "benchmarks", "docs", ".ci", "scripts")
# Folders that are not words: at the top, data, run outputs, builds and other environments; anywhere, caches.
SKIPPED_TOP = {"data", "outputs", "runs", "build", "dist", ".transformers_envs", ".transformers_tests"}
SKIPPED_ANY = {".git", "__pycache__", "artifacts"}

# Names that are examples by nature, not paths of this repository. Each with its reason.
ALLOWED_NAMES = {
    "docs/quantization.md": "CTranslate2's own documentation (its repository's docs/), cited for the int8 rule",
    "tests/test_modeling_common.py": "a file of transformers' own test tree, fetched by .ci/fetch_transformers_tests.sh",
    "tests/generation/test_utils.py": "a file of transformers' own test tree, fetched by .ci/fetch_transformers_tests.sh",
    "tests/exporters/test_export.py": "a file of transformers' own test tree, fetched by .ci/fetch_transformers_tests.sh",
    "test_modeling_common.py": "transformers' tests/test_modeling_common.py, fetched by .ci/fetch_transformers_tests.sh",
}
# A path component that is a placeholder (`python -m training.X`, `tests/<wing>/`), not a name.
PLACEHOLDER_RE = re.compile(r"^(?:[A-Z]|.*<[\w-]+>.*)$")

PATH_RE = re.compile(r"(?<![\w./$-])((?:hf_vaswani|training|tests|benchmarks|docs|\.ci|scripts)/[\w.*/{},<>-]*)")
MODULE_RE = re.compile(r"(?<![\w./$-])((?:hf_vaswani_training|hf_vaswani|training)(?:\.[A-Za-z_]\w*)+)")
# File suffixes: a dotted word ending in one of them is a file name, not a module path.
FILE_SUFFIXES = {"py", "md", "json", "yaml", "yml", "sh", "txt", "png", "onnx", "jsonl", "tsv", "gz", "toml", "log"}


# ---- what the words are --------------------------------------------------------------------------------------------


@functools.cache
def repo_files() -> tuple[Path, ...]:
    """The repository's files as a checkout has them (git's list when there is one, else a walk)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
        files = [REPO_ROOT / name for name in listed]
    except (OSError, subprocess.CalledProcessError):
        files = [Path(root) / name for root, _, names in os.walk(REPO_ROOT) for name in names]
    return tuple(
        path
        for path in files
        if path.is_file()
        and path.relative_to(REPO_ROOT).parts[0] not in SKIPPED_TOP
        and not SKIPPED_ANY.intersection(path.relative_to(REPO_ROOT).parts[:-1])
    )


def python_words(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python source."""
    words = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            words.append((token.start[0], token.string))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                words.append((first.lineno, first.value.value))
    return words


def words_of(path: Path) -> list[tuple[int, str]]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        return python_words(text)
    return list(enumerate(text.splitlines(), start=1))


# ---- does a named thing exist --------------------------------------------------------------------------------------


def path_exists(name: str) -> bool:
    name = name.rstrip(".,:;)")
    if not name or name in ALLOWED_NAMES:
        return True
    parts = name.rstrip("/").split("/")
    placeholder = next((i for i, part in enumerate(parts) if PLACEHOLDER_RE.match(part)), None)
    if placeholder is not None:  # `tests/<wing>/test_<file>.py`: the folders before the placeholder must exist
        return placeholder == 0 or path_exists("/".join(parts[:placeholder]) + "/")
    braces = re.search(r"\{([^{}]*)\}", name)
    if braces:  # data/toy/{train,validation,test}.jsonl
        return all(path_exists(name.replace(braces.group(0), part, 1)) for part in braces.group(1).split(","))
    if "*" in name:
        return any(REPO_ROOT.glob(name.rstrip("/")))
    return (REPO_ROOT / name).exists() or git_ignored(name)


@functools.cache
def git_ignored(name: str) -> bool:
    """A path git ignores is something a run writes (benchmarks/results/, tests/artifacts/), not a source file."""
    try:
        return subprocess.run(["git", "check-ignore", "-q", name], cwd=REPO_ROOT).returncode == 0
    except OSError:
        return False


@functools.cache
def module_tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def defined_names(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """Names a module or class body defines: defs, classes, assignments, imports (incl. under if/try)."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name):
                        names[leaf.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
        elif isinstance(node, ast.If | ast.Try | ast.With):
            for block in ("body", "orelse", "finalbody", "handlers"):
                for child in getattr(node, block, []):
                    names.update(defined_names(child.body if isinstance(child, ast.ExceptHandler) else [child]))
    return names


def module_file(top: str, parts: list[str]) -> tuple[Path | None, list[str]]:
    """The source file of the longest module prefix of `parts` under package `top`, and the parts left over."""
    path = REPO_ROOT / ("hf_vaswani" if top == "hf_vaswani" else "training")
    index = 0
    while index < len(parts):
        if (path / parts[index] / "__init__.py").is_file():
            path = path / parts[index]
        elif (path / f"{parts[index]}.py").is_file():
            path = path / f"{parts[index]}.py"
            index += 1
            break
        else:
            break
        index += 1
    file = path / "__init__.py" if path.is_dir() else path
    return (file if file.is_file() else None), parts[index:]


def dotted_exists(dotted: str) -> bool:
    """A dotted name under training, hf_vaswani_training or hf_vaswani: a module file, then attributes it defines."""
    top, *parts = dotted.split(".")
    if any(PLACEHOLDER_RE.match(part) for part in parts):  # `python -m training.X`
        return True
    if parts and parts[-1] in FILE_SUFFIXES:  # a file name, not a module
        return True
    file, rest = module_file(top, parts)
    if file is None:
        return False
    return attribute_exists(file, rest)


def attribute_exists(file: Path, rest: list[str]) -> bool:
    if not rest:
        return True
    names = defined_names(module_tree(file).body)
    node = names.get(rest[0])
    if node is None:
        return False
    if isinstance(node, ast.ImportFrom) and node.level:  # follow `from .x import name` one module further
        package = file.parent
        for _ in range(node.level - 1):
            package = package.parent
        target = package.joinpath(*(node.module or "").split(".")) if node.module else package
        for alias in node.names:
            if (alias.asname or alias.name) == rest[0]:
                if (target / "__init__.py").is_file():
                    target_file = target / "__init__.py"
                elif target.with_suffix(".py").is_file():
                    target_file = target.with_suffix(".py")
                else:  # `from . import module`
                    return (target / f"{alias.name}.py").is_file() or (target / alias.name / "__init__.py").is_file()
                return attribute_exists(target_file, [alias.name, *rest[1:]])
    if len(rest) > 1 and isinstance(node, ast.ClassDef):
        # An attribute of a class with bases may be inherited: then some class of this file must define it.
        classes = [c for c in ast.walk(module_tree(file)) if isinstance(c, ast.ClassDef)] if node.bases else [node]
        return any(rest[1] in defined_names(c.body) for c in classes)
    return True


# A file of code or docs named without one of the roots above: `recipe/train.py`, `explore_svg.py`.
OTHER_FILE_RE = re.compile(r"(?<![\w./$-])((?:[\w-]+/)*[\w-]+\.(?:py|sh|md))\b")
# The packages whose own files the words cite (`modeling_marian.py`, `huggingface_hub/hf_api.py`).
CITED_PACKAGES = ("transformers", "huggingface_hub", "datasets", "accelerate", "evaluate")


@functools.cache
def cited_package_files() -> frozenset[str]:
    """Relative paths (and their tails) of every file in the packages the words cite, found without importing them."""
    import importlib.util

    found = set()
    for name in CITED_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        root = Path(next(iter(spec.submodule_search_locations)))
        for folder, _, files in os.walk(root):
            relative = Path(folder).relative_to(root.parent)
            for file in files:
                parts = (relative / file).parts
                found.update("/".join(parts[i:]) for i in range(len(parts)))
    return frozenset(found)


def other_file_exists(name: str, source: Path | None) -> bool:
    """A file named relative to the naming file's folder or one above it, to training/ or hf_vaswani/, or by its bare
    name anywhere in the repository; else a file of a package the words cite."""
    if name in ALLOWED_NAMES or name.split("/")[0] in PATH_ROOTS:
        return True
    folders = [REPO_ROOT, REPO_ROOT / "training", REPO_ROOT / "hf_vaswani"]
    if source is not None:
        folders += [source.parent, source.parent.parent]
    if any((folder / name).is_file() for folder in folders):
        return True
    if "/" not in name and any(path.name == name for path in repo_files()):
        return True
    return name in cited_package_files()


def stale_in_text(text: str, source: Path | None = None) -> list[str]:
    """Every path, file or dotted module named in `text` that does not exist."""
    stale = [m.group(1).rstrip(".,:;)") for m in PATH_RE.finditer(text) if not path_exists(m.group(1))]
    stale += [m.group(1) for m in MODULE_RE.finditer(text) if not dotted_exists(m.group(1).rstrip("."))]
    stale += [m.group(1) for m in OTHER_FILE_RE.finditer(text) if not other_file_exists(m.group(1), source)]
    return stale


def stale_names(path: Path) -> list[str]:
    """'file:line: name' for every path or dotted module in the words of `path` that does not exist."""
    stale = []
    for line, text in words_of(path):
        for offset, chunk in enumerate(text.splitlines()):
            where = f"{path.relative_to(REPO_ROOT)}:{line + offset}"
            stale += [f"{where}: {name}" for name in stale_in_text(chunk, path)]
    return stale


def test_every_named_path_and_module_exists():
    stale = [entry for path in repo_files() if path.suffix in (".md", ".py") for entry in stale_names(path)]
    assert not stale, f"{len(stale)} names of paths or modules that do not exist:\n" + "\n".join(stale)


def test_the_stale_name_check_fails_on_stale_names(tmp_path):
    """The check above can fail: fed words naming moved files and modules, it reports each of them."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""See training/decoding.py and `training.decoding.translate`; tests/test_schedule.py checks it.\n\n'
        "hf_vaswani_training.serving.export.no_such_function, hf_vaswani.no_such_module.\n"
        '"""\n\n'
        "# training/serving/export.py, training.serving.export.onnx_greedy_decode and hf_vaswani.preset_config exist\n"
        "# training/recipes/toy.json moved; recipe/train.py and modeling_marian.py exist, recipe/nothing.py does not\n",
        encoding="utf-8",
    )
    found = [name for _, text in words_of(sample) for name in stale_in_text(text, REPO_ROOT / "training" / "x.py")]
    expected = "training/decoding.py training.decoding.translate tests/test_schedule.py training/recipes/toy.json"
    expected += " hf_vaswani_training.serving.export.no_such_function hf_vaswani.no_such_module recipe/nothing.py"
    assert sorted(found) == sorted(expected.split())


# ---- the paper -> code table ---------------------------------------------------------------------------------------


def test_paper_to_code_table_names_what_exists():
    """Each backticked name in README's "Where the paper is in the code" is defined in the file its row names
    (hf_vaswani/modeling_vaswani.py unless the row names another)."""
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("## Where the paper is in the code", 1)[1].strip().split("\n\n", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| §") or line.startswith("| Table")]
    assert len(rows) >= 10
    missing = []
    for row in rows:
        code = row.split("|")[2]
        files = re.findall(r"`((?:hf_vaswani|training)/[\w/]+\.(?:py|json))`", code)
        files = [REPO_ROOT / name for name in files if name.endswith(".py")]
        files.append(REPO_ROOT / "hf_vaswani" / "modeling_vaswani.py")
        for name in re.findall(r"`([A-Za-z_][\w.]*)`", code):
            if name.startswith(("--", "training", "hf_vaswani")) or name.endswith((".json", ".py")):
                continue
            if name in {"dropout", "label_smoothing", "inverse_sqrt"}:  # words of the model's code; the stock schedule
                assert name == "inverse_sqrt" or name in files[-1].read_text(encoding="utf-8"), name
                continue
            parts = name.lstrip(".").split(".")
            if not any(_defined_in(file, parts) for file in files):
                missing.append(f"{row[:40]}...: {name}")
    for option in re.findall(r"`(--\w+)`", table):
        assert option in train_options(), option
    assert not missing, missing


def _defined_in(file: Path, parts: list[str]) -> bool:
    tree = module_tree(file)
    if attribute_exists(file, parts):
        return True
    # An attribute set in a method (`self.embed_scale = ...`) or a class attribute of any class in the file.
    return any(
        isinstance(node, ast.Attribute) and node.attr == parts[-1] and isinstance(node.ctx, ast.Store)
        for node in ast.walk(tree)
    ) or any(
        isinstance(node, ast.ClassDef) and parts[-1] in defined_names(node.body)
        for node in ast.walk(tree)
        if len(parts) == 1
    )


# ---- (b) documented commands against the wheel ---------------------------------------------------------------------

USER_DOCS = ("README.md", "model_card.md", "training/data/TOY_CORPUS.md", "training/recipe/templates/model_card.md")
SHELL_LANGUAGES = {"bash", "sh", "shell", "console"}
PYTHON_LANGUAGES = {"python", "py", "pycon"}
FENCE_RE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)


def user_doc_files() -> list[Path]:
    docs = sorted((REPO_ROOT / "docs").rglob("*.md"))
    return [REPO_ROOT / name for name in USER_DOCS] + docs


def fenced_blocks(language_set: set[str]) -> list[tuple[str, str]]:
    """(where, code) of every fenced block in the user docs whose language is in `language_set`."""
    blocks = []
    for path in user_doc_files():
        text = path.read_text(encoding="utf-8")
        for match in FENCE_RE.finditer(text):
            if match.group(1).lower() in language_set:
                line = text[: match.start()].count("\n") + 1
                blocks.append((f"{path.relative_to(REPO_ROOT)}:{line}", match.group(2)))
    return blocks


@functools.cache
def pyproject() -> dict:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def console_scripts() -> dict[str, str]:
    return pyproject()["project"]["scripts"]


def wheel_modules() -> set[str]:
    """Every module the wheel installs, by its installed name."""
    config = pyproject()["tool"]["setuptools"]
    package_dir = config.get("package-dir", {})
    modules = set()
    for package in config["packages"]:
        top = package.split(".")[0]
        folder = REPO_ROOT / package_dir.get(top, top) / Path(*package.split(".")[1:])
        modules.add(package)
        modules.update(f"{package}.{file.stem}" for file in folder.glob("*.py") if file.stem != "__init__")
    return modules


# Import names of the dependencies in pyproject (its distribution names differ from some import names), and what
# they pull in that the docs use directly (numpy comes with torch, transformers and datasets).
_SAME_NAME = "torch transformers huggingface_hub safetensors tokenizers datasets accelerate evaluate sacrebleu tqdm"
_EXTRAS = "matplotlib gradio onnx onnxruntime ctranslate2 pytest numpy"
THIRD_PARTY_IMPORTS = {name: name for name in f"{_SAME_NAME} {_EXTRAS}".split()} | {"yaml": "pyyaml"}


def test_third_party_imports_are_dependencies():
    """The table above stays honest: each distribution it names is a dependency or extra of the package."""
    project = pyproject()["project"]
    requirements = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    declared = {re.split(r"[<>=\[ ;]", requirement, maxsplit=1)[0].lower() for requirement in requirements}
    assert set(THIRD_PARTY_IMPORTS.values()) - {"numpy"} <= declared


def _options_from_help(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", text))


@functools.cache
def command_helps() -> dict[str, str]:
    """`--help` of every console script and of every `python -m` module of ours the docs use, run in parallel."""
    wanted = {script: [shutil.which(script) or script, "--help"] for script in console_scripts()}
    for module in documented_python_modules():
        if module.startswith("hf_vaswani"):
            wanted[module] = [sys.executable, "-m", module, "--help"]
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    running = {
        name: subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)
        for name, command in wanted.items()
    }
    helps = {}
    for name, process in running.items():
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, f"{name} --help failed ({process.returncode}): {err[-2000:]}"
        helps[name] = out
    return helps


def train_options() -> set[str]:
    return _options_from_help(command_helps()["vaswani-train"])


def shell_commands(code: str) -> list[tuple[list[str], str]]:
    """(tokens, trailing comment) of each simple command in a shell block; `bash -c '...'` is read inside."""
    commands = []
    for logical in code.replace("\\\n", " ").splitlines():
        stripped = logical.strip()
        if not stripped or stripped.startswith("#"):
            continue
        lexer = shlex.shlex(stripped, posix=True, punctuation_chars=";&|<>")
        lexer.whitespace_split, lexer.commenters = True, ""
        tokens = list(lexer)
        # A trailing comment: the first token that starts with # (a # inside quotes stays inside its token).
        cut = next((i for i, token in enumerate(tokens) if token.startswith("#")), len(tokens))
        comment, tokens = " ".join(tokens[cut:]).lstrip("#"), tokens[:cut]
        current: list[str] = []
        for token in tokens + [";"]:
            if token in {";", "&&", "||", "|", "&"}:
                if current:
                    commands.append((current, comment))
                current = []
            else:
                current.append(token)
    for tokens, _ in list(commands):
        for index in range(len(tokens) - 2):
            if tokens[index : index + 2] == ["bash", "-c"]:
                commands.extend(shell_commands(tokens[index + 2]))
    return commands


def _options_in(tokens: list[str]) -> list[str]:
    options = []
    for token in tokens:
        token = token.strip("[]")
        if token in {"<", ">"}:
            break  # what follows a redirection is a file
        if token.startswith("--") and len(token) > 2:
            options.append(token.split("=", 1)[0])
    return options


@functools.cache
def documented_python_modules() -> tuple[str, ...]:
    modules = set()
    for _, code in fenced_blocks(SHELL_LANGUAGES):
        for tokens, _ in shell_commands(code):
            if "-m" in tokens:
                modules.add(tokens[tokens.index("-m") + 1])
    return tuple(sorted(modules))


def shell_problems() -> list[str]:
    scripts = console_scripts()
    modules = wheel_modules()
    extras = set(pyproject()["project"]["optional-dependencies"])
    problems = []
    for where, code in fenced_blocks(SHELL_LANGUAGES):
        for tokens, comment in shell_commands(code):
            while tokens and re.fullmatch(r"[A-Za-z_]\w*=.*", tokens[0]):  # VAR=value before a command
                tokens = tokens[1:]
            if not tokens:
                continue
            program = tokens[0]
            if program.startswith("vaswani-"):
                if program not in scripts:
                    problems.append(f"{where}: {program} is not a console script of pyproject.toml")
                    continue
                known = _options_from_help(command_helps()[program])
                comment_options = [o for o in re.findall(r"(?<![\w-])--[A-Za-z][\w-]*", comment)]
                for option in _options_in(tokens[1:]) + comment_options:
                    if option not in known:
                        problems.append(f"{where}: {program} has no option {option}")
            elif program in {"python", "python3"} and len(tokens) > 1:
                if tokens[1] == "-m":
                    module = tokens[2]
                    top = module.split(".")[0]
                    if module.startswith("hf_vaswani"):
                        if module not in modules:
                            problems.append(f"{where}: python -m {module}: the wheel has no such module")
                            continue
                        known = _options_from_help(command_helps()[module])
                        for option in _options_in(tokens[3:]):
                            if option not in known:
                                problems.append(f"{where}: python -m {module} has no option {option}")
                    elif top not in THIRD_PARTY_IMPORTS:
                        problems.append(f"{where}: python -m {module}: not a module the wheel or its dependencies give")
                elif not tokens[1].startswith("-") and not (REPO_ROOT / tokens[1]).is_file():
                    problems.append(f"{where}: python {tokens[1]}: no such file in the repository")
            elif program == "accelerate" and "-m" in tokens:
                module = tokens[tokens.index("-m") + 1]
                if module not in modules:
                    problems.append(f"{where}: accelerate launch -m {module}: the wheel has no such module")
                elif module == "hf_vaswani_training.train":
                    for option in _options_in(tokens[tokens.index("-m") + 2 :]):
                        if option not in train_options():
                            problems.append(f"{where}: vaswani-train has no option {option}")
            elif program == "pip" and "install" in tokens:
                for token in tokens:
                    for extra in re.findall(r"\[([\w,-]+)\]", token):
                        for name in extra.split(","):
                            if name not in extras:
                                problems.append(f"{where}: pip install: no extra {name!r} in pyproject.toml")
    return problems


def test_documented_shell_commands_exist_with_their_options():
    problems = shell_problems()
    assert not problems, "\n".join(problems)


def test_documented_commands_use_no_checkout_module():
    """`python -m training.X` and `import training` only work inside a clone; user docs use the installed names."""
    found = []
    for where, code in fenced_blocks(SHELL_LANGUAGES | PYTHON_LANGUAGES):
        for match in re.finditer(r"(?:-m\s+|import\s+|from\s+)(training(?:\.\w+)*)\b", code):
            found.append(f"{where}: {match.group(1)}")
    assert not found, found


def python_problems(where: str, code: str) -> list[str]:
    try:
        tree = ast.parse(code)
    except SyntaxError as error:
        return [f"{where}: does not parse: {error}"]
    modules = wheel_modules()
    problems = []
    defined = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                names = [alias.name for alias in node.names]
            for module in names:
                top = module.split(".")[0]
                if top in {"hf_vaswani", "hf_vaswani_training"}:
                    if module not in modules:
                        problems.append(f"{where}: the wheel has no module {module}")
                    elif isinstance(node, ast.ImportFrom):
                        file, rest = module_file(top if top == "hf_vaswani" else "training", module.split(".")[1:])
                        for alias in node.names:
                            if file is None or rest or not attribute_exists(file, [alias.name]):
                                problems.append(f"{where}: {module} defines no {alias.name}")
                elif top not in THIRD_PARTY_IMPORTS and top not in sys.stdlib_module_names:
                    problems.append(
                        f"{where}: {module} is neither the wheel's, a dependency's nor the standard library's"
                    )
            defined.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            defined.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in defined:
            problems.append(f"{where}: {node.id} is used but never defined in the block")
    return problems


def test_documented_python_blocks_import_what_the_wheel_has_and_define_what_they_use():
    blocks = fenced_blocks(PYTHON_LANGUAGES)
    assert len(blocks) >= 8
    problems = [problem for where, code in blocks for problem in python_problems(where, code)]
    assert not problems, "\n".join(problems)


def test_the_command_checks_fail_on_broken_commands(monkeypatch):
    """The checks of part (b) can fail: an unknown option, a checkout-only module and an undefined name are found."""
    broken_shell = (
        "vaswani-translate outputs/toy --no_such_option 1 < test.en   # or --greedy\n"
        "python -m training.export outputs/toy onnx\n"
        "python -m hf_vaswani_training.no_such_module\n"
        "vaswani-nothing outputs/toy\n"
        'pip install "hf-vaswani[no_such_extra]"\n'
    )
    monkeypatch.setattr(
        sys.modules[__name__],
        "fenced_blocks",
        lambda languages: [("sample", broken_shell)] if "bash" in languages else [],
    )
    problems = shell_problems()
    assert any("has no option --no_such_option" in p for p in problems), problems
    assert not any("--greedy" in p for p in problems), problems
    assert any("training.export: not a module" in p for p in problems), problems
    assert any("hf_vaswani_training.no_such_module: the wheel has no such module" in p for p in problems), problems
    assert any("vaswani-nothing is not a console script" in p for p in problems), problems
    assert any("no extra 'no_such_extra'" in p for p in problems), problems
    assert len(problems) == 5, problems

    onnx_snippet = (
        "from hf_vaswani_training.serving.export import onnx_greedy_decode\n"
        'onnx_greedy_decode("outputs/toy-onnx", input_ids, attention_mask, max_new_tokens=60)\n'
    )
    assert sorted(python_problems("sample", onnx_snippet)) == [
        "sample: attention_mask is used but never defined in the block",
        "sample: input_ids is used but never defined in the block",
    ]
    assert python_problems("sample", "from hf_vaswani_training.serving.decoding import no_such_name\n") == [
        "sample: hf_vaswani_training.serving.decoding defines no no_such_name"
    ]


# ---- (c) the documented commands, run from an empty directory ------------------------------------------------------

# What part (c) does not run, and why: each needs what a test cannot have (the full main job's minutes, a cluster, a
# GPU, WMT files, the network, a browser, a server that does not return) or is this test's own command.
NOT_RUN = {
    "vaswani-train": "the full main job takes minutes; the fixture runs it shortened",
    "accelerate": "several processes or machines (tests/recipe/test_multi_machine.py runs the launch)",
    "vaswani-prepare-wmt": "needs the WMT 2014 files",
    "vaswani-explore": "serves a page until stopped (tests/serving/test_explore.py)",
    "pip": "installs packages",
    "hf": "uploads to the Hub",
}


@pytest.fixture(scope="module")
def empty_directory_with_main_job(tmp_path_factory):
    """The main job shortened (as .ci/wheel_smoke.sh runs it), from an empty directory: outputs/toy as the docs
    expect, with 5 checkpoints so that `vaswani-average --last 5` has them."""
    work = tmp_path_factory.mktemp("docs_commands")
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": "", "TOKENIZERS_PARALLELISM": "false"}
    shortened = "--max_steps 10 --save_steps 2 --save_total_limit 6 --toy_num_train 2000 --toy_num_test 20"
    quiet = "--max_length_offset 10 --report_to none --dataloader_num_workers 0"
    command = ["vaswani-train", "toy", *shortened.split(), *quiet.split()]
    subprocess.run(command, cwd=work, env=environment, check=True, capture_output=True, timeout=900)
    return work, environment


@pytest.mark.slow
def test_documented_commands_run_from_an_empty_directory(empty_directory_with_main_job):
    work, environment = empty_directory_with_main_job
    failures = []
    ran = 0
    for where, code in fenced_blocks(SHELL_LANGUAGES):
        if "#SBATCH" in code:
            continue  # a SLURM batch script: a cluster's
        for tokens, _ in shell_commands(code):
            while tokens and re.fullmatch(r"[A-Za-z_]\w*=.*", tokens[0]):
                tokens = tokens[1:]
            if not tokens or (tokens[0] in NOT_RUN and tokens[1:] != ["--help"]):
                continue
            if tokens[0] == "vaswani-push" and "--dry-run" not in tokens:
                continue  # would reach the Hub
            if tokens[0] in {"python", "python3"} and tokens[1:3] == ["-m", "pytest"]:
                continue  # this suite
            if tokens[0] in {"python", "python3"} and not tokens[1].startswith("-"):
                continue  # a script of the checkout (scripts/, docs/): a developer's command, not the wheel's
            line = " ".join(shlex.quote(t) if t not in {"<", ">"} else t for t in tokens if not t.startswith("["))
            line = re.sub(r"\s\[[^\]]*\]", "", line)
            result = subprocess.run(line, shell=True, cwd=work, env=environment, capture_output=True, text=True)
            ran += 1
            if result.returncode != 0:
                failures.append(f"{where}: {line}\n{result.stderr[-1500:]}")
    for where, code in fenced_blocks(PYTHON_LANGUAGES):
        if "MODEL_DIR_OR_REPO" in code or '"..."' in code:
            continue  # the model card's template of a snippet, with a placeholder for the repository
        result = subprocess.run(
            [sys.executable, "-c", code], cwd=work, env=environment, capture_output=True, text=True, timeout=600
        )
        ran += 1
        if result.returncode != 0:
            failures.append(f"{where}: python block\n{result.stderr[-1500:]}")
    assert ran >= 15
    assert not failures, "\n\n".join(failures)
