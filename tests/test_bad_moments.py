"""The break-it rows of issue 27 that ended in a traceback or a crash: each is now exit status 2 and ONE line on stderr
naming what is wrong and the fix, and nothing half-written is left where a later run or a user would take it for a
result. The rows are data (`ROWS`): a new one is one line.

A row: (id, command, argv, fragments the error line must hold). Strings in argv and fragments may
name places as {model}, {out}...; each place is made by the `PLACES` function of that name (a read-only or a full
file system is a small tmpfs: mounting needs root, so those rows are skipped elsewhere).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import socket
import stat
import subprocess
from pathlib import Path

import pytest

from hf_vaswani_training import staging
from tests.conftest import TINY_RUN, assert_one_line_error, make_model_folder, run_cli

# The short run whose checkpoints the resume rows use: 2 steps, a checkpoint after each.
CHECKPOINTED = [*TINY_RUN[:-6], "--max_steps", "2", "--save_steps", "1", "--report_to", "none", "--toy_num_validation",
                "5", "--toy_num_test", "5", "--final_eval_splits", "none"]  # fmt: skip
TORCH_SHORT_WRITE = "[enforce fail at inline_container.cc:672] . unexpected pos 6798720 vs 6798608"

ROWS = [
    # ---- tracebacks where the README promises one line
    ("device-cuda-without-gpu", "translate", ["{model}", "A dog .", "--device", "cuda", "--cpu_only_machine"],
     ["--device cuda", "no CUDA GPU", "--device cpu"]),
    ("weights-of-another-size-translate", "translate", ["{wrong_size}", "A dog ."],
     ["{wrong_size}/model.safetensors", "has shape [32]", "config.json makes it [64]"]),
    ("weights-of-another-size-export", "export", ["{wrong_size}", "{out}"],
     ["{wrong_size}/model.safetensors", "has shape [32]", "config.json makes it [64]"]),
    ("push-a-pickle", "push", ["--dry-run", "{pickled}", "someone/model"],
     ["{pickled}/pytorch_model.bin", "pickle", "model.safetensors"]),
    ("explorer-port-in-use", "explore", ["{model}", "--port", "{busy_port}"],
     ["--port {busy_port}", "choose another --port"]),
    ("read-only-translate-output", "translate", ["{model}", "A dog .", "--output", "{read_only}/out.txt"],
     ["--output {read_only}/out.txt", "read-only file system"]),
    ("read-only-export-folder", "export", ["{model}", "{read_only}/onnx"],
     ["OUT_DIR {read_only}/onnx", "read-only file system"]),
    ("read-only-train-output", "train", [*TINY_RUN, "--output_dir", "{read_only}/run"],
     ["--output_dir {read_only}/run", "read-only file system"]),
    ("batch-size-0", "train", [*TINY_RUN, "--max_tokens", "0", "--per_device_train_batch_size", "0", "--output_dir",
                               "{out}"], ["--per_device_train_batch_size", "0"]),
    ("malformed-preset", "train", [*TINY_RUN[2:], "--preset", "{bad_preset}", "--output_dir", "{out}"],
     ["--preset {bad_preset}", "not valid JSON"]),
    ("max-tokens-below-the-longest-sentence", "train",
     [*TINY_RUN, "--train_file", "{pairs}/train", "--source_lang", "en", "--target_lang", "de", "--max_tokens", "12",
      "--output_dir", "{out}"], ["--max_tokens 12", "{pairs}/train.en:2 has", "raise --max_tokens"]),
    ("resume-with-another-preset", "train",
     [*CHECKPOINTED, "--preset", "small", "--max_steps", "3", "--output_dir", "{run}", "--resume_from_checkpoint",
      "True"], ["--resume_from_checkpoint {run}/checkpoints/checkpoint-2", "d_model 64 vs 256", "--preset"]),
    ("resume-without-optimizer", "train",
     [*CHECKPOINTED, "--max_steps", "3", "--output_dir", "{run_without_optimizer.pt}", "--resume_from_checkpoint",
      "{run_without_optimizer.pt}/checkpoints/checkpoint-2"], ["optimizer.pt is missing", "earlier checkpoint"]),
    ("resume-without-scheduler", "train",
     [*CHECKPOINTED, "--max_steps", "3", "--output_dir", "{run_without_scheduler.pt}", "--resume_from_checkpoint",
      "{run_without_scheduler.pt}/checkpoints/checkpoint-2"], ["scheduler.pt is missing", "earlier checkpoint"]),
    ("resume-without-rng-state", "train",
     [*CHECKPOINTED, "--max_steps", "3", "--output_dir", "{run_without_rng_state.pth}", "--resume_from_checkpoint",
      "{run_without_rng_state.pth}/checkpoints/checkpoint-2"], ["rng_state.pth is missing", "earlier checkpoint"]),
    # ---- a full disk: one line, the folder named, nothing half-written left
    ("full-disk-translate-output", "translate", ["{model}", "A dog .", "--output", "{full}/out.txt"],
     ["cannot write {full}/out.txt", "No space left on device", "the disk is full"]),
    ("full-disk-export", "export", ["{model}", "{full}/onnx"],
     ["cannot write {full}/onnx", "No space left on device", "the disk is full"]),
    ("full-disk-checkpoint", "train", [*CHECKPOINTED, "--output_dir", "{small_disk}/run"],
     ["cannot write {small_disk}/run/checkpoints/checkpoint-1", "No space left on device"]),
]  # fmt: skip


# ---- places -----------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def tmpfs(folder: Path, options: str):
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    return make_model_folder(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A run of CHECKPOINTED (2 steps, checkpoints 1 and 2, averaged) written under umask 022."""
    from hf_vaswani_training import cli

    folder = tmp_path_factory.mktemp("run") / "run"
    old = os.umask(0o022)
    try:
        assert cli.train([*CHECKPOINTED, "--output_dir", str(folder)]) == 0
    finally:
        os.umask(old)
    return folder


def _copy_run_without(trained_run, tmp_path, name):
    folder = tmp_path / f"run-without-{name}"
    shutil.copytree(trained_run, folder)
    (folder / "checkpoints" / "checkpoint-2" / name).unlink()
    return folder


def _wrong_size(model_folder, tmp_path):
    folder = tmp_path / "wrong-size"
    shutil.copytree(model_folder, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(d_model=64, encoder_ffn_dim=128, decoder_ffn_dim=128)  # weights are d_model 32
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _pickled(model_folder, tmp_path):
    import torch
    from safetensors.torch import load_file

    folder = tmp_path / "pickled"
    shutil.copytree(model_folder, folder)
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    return folder


def _pairs(tmp_path):
    folder = tmp_path / "pairs"
    folder.mkdir()
    (folder / "train.en").write_text("a cat .\nthe old dog sleeps in the big green garden near the house today .\n" * 5)
    (folder / "train.de").write_text(
        "eine katze .\nder alte hund schlaeft heute im grossen gruenen garten beim haus .\n" * 5
    )
    return folder


def _full(stack, tmp_path):
    folder = stack.enter_context(tmpfs(tmp_path / "full", "size=64k"))
    with contextlib.suppress(OSError), open(folder / "filler", "wb") as filler:
        filler.write(b"x" * 1024 * 1024)  # whatever fits
    return folder


PLACES = {
    "model": lambda request, stack, tmp_path: request.getfixturevalue("model_folder"),
    "out": lambda request, stack, tmp_path: tmp_path / "out",
    "wrong_size": lambda request, stack, tmp_path: _wrong_size(request.getfixturevalue("model_folder"), tmp_path),
    "pickled": lambda request, stack, tmp_path: _pickled(request.getfixturevalue("model_folder"), tmp_path),
    "busy_port": lambda request, stack, tmp_path: _busy_port(stack),
    "read_only": lambda request, stack, tmp_path: stack.enter_context(tmpfs(tmp_path / "ro", "ro,size=64k")),
    "full": lambda request, stack, tmp_path: _full(stack, tmp_path),
    "small_disk": lambda request, stack, tmp_path: stack.enter_context(tmpfs(tmp_path / "small", "size=2m")),
    "bad_preset": lambda request, stack, tmp_path: _write(tmp_path / "preset.json", '{"d_model": 64,\n  oops}'),
    "pairs": lambda request, stack, tmp_path: _pairs(tmp_path),
    "run": lambda request, stack, tmp_path: request.getfixturevalue("trained_run"),
    **{
        f"run_without_{name}": (
            lambda request, stack, tmp_path, name=name: _copy_run_without(
                request.getfixturevalue("trained_run"), tmp_path, name
            )
        )
        for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth")
    },
}


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _busy_port(stack) -> int:
    listener = stack.enter_context(socket.socket())
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    return listener.getsockname()[1]


def _fill(text: str, places: dict) -> str:
    for name, value in places.items():
        text = text.replace("{" + name + "}", str(value))
    return text


# ---- the rows -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("row", ROWS, ids=[row[0] for row in ROWS])
def test_a_bad_moment_is_one_line(row, request, tmp_path, capsys, monkeypatch):
    name, command, argv, fragments = row
    if "--cpu_only_machine" in argv:
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
        argv = [token for token in argv if token != "--cpu_only_machine"]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # The commands' logging.basicConfig would otherwise keep writing to an earlier test's captured (closed) stderr.
    monkeypatch.setattr(logging.root, "handlers", [])
    with contextlib.ExitStack() as stack:
        wanted = {key for token in [*argv, *fragments] for key in PLACES if "{" + key + "}" in token}
        places = {key: PLACES[key](request, stack, tmp_path) for key in sorted(wanted)}
        before = _listing(places)
        status, stderr = run_cli(command, *[_fill(token, places) for token in argv], capsys=capsys)
        line = assert_one_line_error(status, stderr, command, *[_fill(fragment, places) for fragment in fragments])
        assert "weights_only" not in line  # torch's advice, which would run the pickle
        _assert_nothing_half_written(name, places, before)


def _listing(places: dict) -> dict[str, set[str]]:
    return {
        key: _files(Path(value)) for key, value in places.items() if isinstance(value, Path) and Path(value).is_dir()
    }


def _files(folder: Path) -> set[str]:
    return {str(path.relative_to(folder)) for path in folder.rglob("*")}


def _assert_nothing_half_written(name: str, places: dict, before: dict) -> None:
    for key in ("full", "small_disk", "read_only", "out"):
        if key not in places or not Path(places[key]).exists():
            continue
        new = _files(Path(places[key])) - before.get(key, set())
        hidden = [path for path in new if Path(path).name.startswith(staging.STAGING_PREFIX)]
        assert not hidden, (name, hidden)
        if key == "small_disk":  # the run's tokenizer stays (reused on the next run); no checkpoint, whole or cut
            assert not [path for path in new if "checkpoint-" in path], (name, sorted(new))
        elif key != "out":
            assert not new, (name, sorted(new))


# ---- what decides a full disk --------------------------------------------------------------------------------------------


def test_torch_zip_writer_short_write_is_a_full_disk_only_when_the_disk_is_nearly_full(tmp_path, monkeypatch):
    error = RuntimeError(TORCH_SHORT_WRITE)
    monkeypatch.setattr(staging, "free_bytes", lambda destination: 1024)
    usage_error = staging.storage_error(error, tmp_path / "checkpoint-3")
    assert usage_error is not None
    assert f"cannot write {tmp_path / 'checkpoint-3'}: No space left on device (the disk is full" in str(usage_error)
    monkeypatch.setattr(staging, "free_bytes", lambda destination: 50 * 10**9)
    assert staging.storage_error(error, tmp_path / "checkpoint-3") is None  # a real bug keeps its traceback
    assert staging.storage_error(RuntimeError("some other failure"), tmp_path) is None


def test_safetensors_names_a_full_disk_in_its_own_words(tmp_path):
    error = Exception("Error while serializing: I/O error: No space left on device (os error 28)")
    assert "the disk is full" in str(staging.storage_error(error, tmp_path / "model"))


def test_the_space_needed_is_said_when_known(tmp_path, monkeypatch):
    monkeypatch.setattr(staging, "free_bytes", lambda destination: 2_000_000)
    message = str(staging.storage_error(OSError(errno.ENOSPC, "No space left on device"), tmp_path, 9_000_000))
    assert "2.0 MB free, 9.0 MB needed" in message


def test_a_checkpoint_save_cut_by_torch_zip_writer_is_one_line_and_leaves_no_folder(tmp_path, capsys, monkeypatch):
    """The issue's crash, without a real full disk: torch.save of optimizer.pt fails as torch's zip writer does."""
    import torch

    from hf_vaswani_training import cli

    real_save = torch.save

    def short_write(obj, f, *args, **kwargs):
        if str(f).endswith("optimizer.pt"):
            raise RuntimeError(TORCH_SHORT_WRITE)
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", short_write)
    monkeypatch.setattr(staging, "free_bytes", lambda destination: 4096)
    output = tmp_path / "run"
    status = cli.train([*CHECKPOINTED, "--output_dir", str(output)])
    line = assert_one_line_error(status, capsys.readouterr().err, "train", "checkpoint-1", "No space left on device")
    assert "unexpected pos" not in line
    assert not [path for path in _files(output) if "checkpoint-" in path], sorted(_files(output))


# ---- the user's umask -----------------------------------------------------------------------------------------------------


def test_model_files_get_the_users_umask(trained_run):
    """Final model, checkpoints and the averaged model: 0644 under umask 022 (safetensors alone writes 0600)."""
    folders = [trained_run, *sorted((trained_run / "checkpoints").iterdir())]
    assert (trained_run / "checkpoints" / ".averaged") in folders
    modes = {
        str(path): oct(stat.S_IMODE(path.stat().st_mode))
        for folder in folders
        for path in folder.iterdir()
        if path.is_file() and path.name != ".vaswani-train.lock"
    }
    assert (trained_run / "model.safetensors").is_file()
    assert set(modes.values()) == {"0o644"}, {path: mode for path, mode in modes.items() if mode != "0o644"}


def test_a_staged_file_gets_the_users_umask(tmp_path):
    old = os.umask(0o027)
    try:
        with staging.staged_file(tmp_path / "out.txt") as staged:
            os.chmod(staged, 0o600)
            staged.write_text("x\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out.txt").stat().st_mode) == 0o640
    assert [path.name for path in tmp_path.iterdir()] == ["out.txt"]
