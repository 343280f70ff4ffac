"""One quiet log for vaswani-translate, -average, -prepare-wmt and -explore (training/console.py): the libraries keep to
warnings unless --verbose brings their INFO lines back; and every door that loads torch sets OMP_WAIT_POLICY before
it imports its command's module (training/cli.py, training/threads.py passive_waits)."""

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, make_hub_folder, make_model_folder, tiny_model

VERBOSE_COMMANDS = ["translate", "average", "prepare_wmt", "explore"]


def run_module(module: str, *argv, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    """A command's module run with `python -m` in a fresh process: the libraries are imported as a user's run imports
    them (after the command set up its log), not as this test process already has them."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_VERBOSITY") and k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    env.update(OMP_NUM_THREADS="1", **(env_extra or {}))
    return subprocess.run(
        [sys.executable, "-m", f"hf_vaswani_training.{module}", *map(str, argv)],
        capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize("command", VERBOSE_COMMANDS)
def test_help_lists_verbose(command, capsys):
    from hf_vaswani_training import cli

    with pytest.raises(SystemExit) as exited:
        getattr(cli, command)(["--help"])
    assert exited.value.code == 0
    assert "--verbose" in capsys.readouterr().out


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return make_model_folder(tmp_path_factory.mktemp("quiet") / "model")


@pytest.mark.parametrize("verbose", [False, True])
def test_translate_shows_the_libraries_info_lines_only_with_verbose(model_dir, verbose):
    completed = run_module("translate", model_dir, "A mouse sits .", *(["--verbose"] if verbose else []))
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.strip(), completed.stderr[-3000:]  # a translation, whatever the random weights make
    # transformers logs the config it loads at INFO, in the commands' one format (not its own "[transformers]" one)
    assert (" INFO transformers." in completed.stderr) == verbose, completed.stderr[-3000:]
    assert "[transformers]" not in completed.stderr


@pytest.mark.parametrize("verbose", [False, True])
def test_prepare_wmt_shows_datasets_info_lines_only_with_verbose_and_once(tmp_path, verbose):
    rows = {"translation": [{"en": "a small dog", "de": "ein kleiner Hund"}] * 3}
    hub = make_hub_folder(tmp_path / "hub", {"train": rows})
    completed = run_module(
        "prepare_wmt", "--source_lang", "en", "--target_lang", "de", "--out", tmp_path / "out",
        "--dataset_name", hub, "--dataset_config_name", "de-en", *(["--verbose"] if verbose else []),
        env_extra={"HF_DATASETS_CACHE": str(tmp_path / "cache")},
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "train: 3 pairs" in completed.stdout
    info = [line for line in completed.stderr.splitlines() if " INFO datasets." in line]
    assert bool(info) == verbose, completed.stderr[-3000:]
    # datasets' own stderr handler is off: each line once, in the commands' format
    bare = {line.strip() for line in completed.stderr.splitlines()}
    assert not [line for line in info if line.split(": ", 1)[1].strip() in bare], completed.stderr[-3000:]


def spy_on_setup_logging(monkeypatch, module) -> list[bool]:
    seen = []
    real = module.setup_logging

    def spy(verbose=False, **kwargs):
        seen.append(verbose)
        real(verbose, **kwargs)

    monkeypatch.setattr(module, "setup_logging", spy)
    return seen


@pytest.mark.parametrize("verbose", [False, True])
def test_average_hands_verbose_to_the_log(tmp_path, monkeypatch, capsys, verbose):
    from hf_vaswani_training import cli
    from hf_vaswani_training.console import quiet_libraries
    from hf_vaswani_training.recipe import average_checkpoints

    seen = spy_on_setup_logging(monkeypatch, average_checkpoints)
    tiny_model().save_pretrained(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    argv = ["--inputs", tmp_path / "a", tmp_path / "b", "--output", tmp_path / "out", *(["--verbose"] * verbose)]
    try:
        assert cli.average([str(a) for a in argv]) == 0, capsys.readouterr().err
    finally:
        quiet_libraries(False)  # the libraries quiet again for the tests after this one
    assert seen == [verbose]
    assert (tmp_path / "out" / "model.safetensors").is_file()


@pytest.mark.parametrize("verbose", [False, True])
def test_explore_hands_verbose_to_the_log_and_a_watch_to_the_page(tmp_path, monkeypatch, verbose):
    from hf_vaswani_training import console, threads
    from hf_vaswani_training.serving import explore

    seen = spy_on_setup_logging(monkeypatch, explore)
    quieted = []
    monkeypatch.setattr(explore, "quiet_libraries", quieted.append)
    monkeypatch.setattr(explore, "model_problem", lambda model: None)
    monkeypatch.setattr(explore, "use_threads", lambda requested, torch: threads.ThreadChoice(1, 2, "test"))
    monkeypatch.setattr(explore, "load_explorer", lambda *args, **kwargs: None)
    monkeypatch.setattr(explore, "launch_options", dict)
    built = {}

    class App:
        def launch(self, **kwargs):
            built["launched"] = True

    def build_app(model, **kwargs):
        built.update(kwargs)
        return App()

    monkeypatch.setattr(explore, "build_app", build_app)
    try:
        assert explore.main(["some/model"] + (["--verbose"] if verbose else [])) == 0
    finally:
        console.quiet_libraries(False)
    assert seen == [verbose] and quieted == [verbose]
    assert isinstance(built["watch"], threads.ThreadWatch) and built["watch"].threads == 1 and built["launched"]


PROBE = """
import os, sys
from hf_vaswani_training import cli

MODULES = {"translate": "serving.translate", "export": "serving.export", "push": "serving.push",
           "average": "recipe.average_checkpoints", "explore": "serving.explore"}
calls = []
real = cli.passive_waits

def spy():
    names = ("torch", "hf_vaswani_training." + MODULES[door])
    calls.append((door, [name for name in names if name in sys.modules]))
    real()

cli.passive_waits = spy
for door in sys.argv[1:]:
    try:
        getattr(cli, door)(["--help"])
    except SystemExit:
        pass
print("CALLS", calls, "TORCH", "torch" in sys.modules, file=sys.stderr)
print("POLICY", os.environ.get("OMP_WAIT_POLICY"), file=sys.stderr)
"""

TORCH_DOORS = ["translate", "export", "push", "average", "explore"]


def test_every_door_that_loads_torch_waits_passively_before_it_imports_its_module():
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    completed = subprocess.run(
        [sys.executable, "-c", PROBE, *TORCH_DOORS], capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=300
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    line = completed.stderr.split("CALLS ", 1)[1].splitlines()[0]
    calls = ast.literal_eval(line.split(" TORCH ")[0])
    # once per door, each before its command's module (and torch, which --help never loads) was imported
    assert calls == [(door, []) for door in TORCH_DOORS], completed.stderr[-3000:]
    assert line.endswith("TORCH False"), line  # --help answers before torch loads
    assert "POLICY PASSIVE" in completed.stderr


@pytest.mark.parametrize("verbose", [False, True])
def test_the_explorers_http_libraries_keep_to_warnings_unless_verbose(logging_put_back, verbose):
    # httpx logs "HTTP Request: GET ..." at INFO for every request gradio makes; the explorer's log would be those.
    import io
    import logging

    from hf_vaswani_training.console import setup_logging

    setup_logging(verbose, stream=io.StringIO())
    expected = logging.INFO if verbose else logging.WARNING
    for name in ("gradio", "httpx", "httpcore"):
        assert logging.getLogger(name).level == expected, name
    assert logging.getLogger("httpx").isEnabledFor(logging.INFO) == verbose
