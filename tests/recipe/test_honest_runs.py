"""A training run that ends honestly: it says when it stopped early, never trains past --max_steps on resume, keeps
its checkpoints whole and out of the uploaded folder, locks its output folder, and turns a full or read-only disk
into one line (issue 21, points 3, 4 and 6)."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file, save_file

import hf_vaswani_training.recipe.checkpoints as checkpoints_module
import hf_vaswani_training.recipe.train as train_module
from hf_vaswani_training.recipe.checkpoints import (
    OutputDirLock,
    checkpoint_problem,
    last_complete_checkpoint,
    list_checkpoints,
    rotate_checkpoints,
    stale_staging_dirs,
)
from hf_vaswani_training.recipe.console import configure_logging
from hf_vaswani_training.recipe.model_card import render_model_card
from hf_vaswani_training.recipe.options import find_recipe, read_recipe
from hf_vaswani_training.recipe.run_record import RunRecord
from hf_vaswani_training.recipe.train import main, stopped_early
from hf_vaswani_training.serving.push import files_to_push
from hf_vaswani_training.usage import UsageError
from tests.conftest import REPO_ROOT, TINY


def fake_checkpoint(directory: Path, step: int) -> Path:
    """The files this Trainer writes into a checkpoint (weights, trainer state, optimizer, scheduler, RNG)."""
    directory.mkdir(parents=True)
    save_file({"w": torch.full((2,), float(step))}, directory / "model.safetensors", metadata={"format": "pt"})
    (directory / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
        (directory / name).write_bytes(b"state")
    return directory


# ---- what a complete checkpoint is -----------------------------------------------------------------------------------


@pytest.mark.parametrize("lost", ["scheduler.pt", "rng_state.pth", "optimizer.pt", "model.safetensors"])
def test_a_checkpoint_missing_any_file_it_needs_is_incomplete(tmp_path, lost):
    """Before: only trainer_state.json and the safetensors headers were checked, so a folder that lost its
    scheduler and RNG state (a deletion cut short) passed, and resuming from it restarted the warmup silently."""
    checkpoint = fake_checkpoint(tmp_path / "checkpoints" / "checkpoint-5", 5)
    assert checkpoint_problem(checkpoint) is None
    (checkpoint / lost).unlink()
    assert lost in checkpoint_problem(checkpoint)
    assert last_complete_checkpoint(tmp_path) is None


def test_a_weights_only_checkpoint_averages_but_does_not_resume(tmp_path):
    """--save_only_model writes no resume state: good for averaging, not for --resume_from_checkpoint."""
    checkpoint = fake_checkpoint(tmp_path / "checkpoint-5", 5)
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
        (checkpoint / name).unlink()
    assert checkpoint_problem(checkpoint) is None
    assert "optimizer.pt" in checkpoint_problem(checkpoint, resumable=True)
    assert last_complete_checkpoint(tmp_path) is None


# ---- rotation -------------------------------------------------------------------------------------------------------


class Killed(BaseException):
    """Stands for SIGTERM arriving in the middle of a deletion."""


def test_rotation_cut_short_leaves_no_complete_looking_partial(tmp_path, monkeypatch):
    """Kill `rmtree` after it removed one file of the oldest checkpoint: no `checkpoint-N` is left partial."""
    run = tmp_path / "checkpoints"
    for step in (3, 6, 9):
        fake_checkpoint(run / f"checkpoint-{step}", step)
    real_rmtree = shutil.rmtree

    def killed_rmtree(path, ignore_errors=False):
        path = Path(path)
        if path.exists():
            (path / "scheduler.pt").unlink()  # the deletion has begun
            raise Killed(path)
        return real_rmtree(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(shutil, "rmtree", killed_rmtree)
    with pytest.raises(Killed):
        rotate_checkpoints(run, save_total_limit=2)
    monkeypatch.undo()
    assert [path.name for path in list_checkpoints(tmp_path)] == ["checkpoint-6", "checkpoint-9"]
    assert all(checkpoint_problem(path) is None for path in list_checkpoints(tmp_path))
    assert [path.name for path in stale_staging_dirs(tmp_path)] == [".tmp-deleting-checkpoint-3"]


def test_rotation_keeps_the_newest_and_the_best(tmp_path):
    run = tmp_path / "checkpoints"
    for step in (3, 6, 9, 12):
        fake_checkpoint(run / f"checkpoint-{step}", step)
    rotate_checkpoints(run, save_total_limit=2, keep=str(run / "checkpoint-3"))
    assert [path.name for path in list_checkpoints(tmp_path)] == ["checkpoint-3", "checkpoint-12"]
    assert not list(run.glob(".tmp-*"))


# ---- the output folder's lock ---------------------------------------------------------------------------------------


def test_a_locked_output_folder_is_refused_naming_it_and_the_holder(tmp_path):
    with OutputDirLock(tmp_path / "run"):
        with pytest.raises(UsageError, match=rf"--output_dir {tmp_path / 'run'} is being written .*PID {os.getpid()}"):
            with OutputDirLock(tmp_path / "run"):
                pass
    with OutputDirLock(tmp_path / "run"):  # released on exit
        pass


def test_a_lock_file_left_by_a_dead_process_blocks_nothing(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / checkpoints_module.LOCK_NAME).write_text(dead.stdout)
    with OutputDirLock(tmp_path) as lock:
        assert lock.path.read_text().strip() == str(os.getpid())


def test_a_second_training_into_a_locked_folder_is_one_line_exit_2(tmp_path):
    """Before: no lock; two runs raced on the same files and the second died with a traceback."""
    output_dir = tmp_path / "run"
    output_dir.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import fcntl, os, sys, time; fd = os.open({str(output_dir / '.vaswani-train.lock')!r},"
         " os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, str(os.getpid()).encode());"
         " print('locked', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "locked"
        completed = subprocess.run(
            [sys.executable, "-m", "hf_vaswani_training.train", *TINY, "--max_steps", "1", "--output_dir", str(output_dir)],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        holder.kill()
        holder.wait()
    assert completed.returncode == 2, completed.stderr[-2000:]
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vaswani-train: error: --output_dir")
    assert f"PID {holder.pid}" in lines[0] and str(output_dir) in lines[0]


def test_an_output_folder_that_cannot_be_created_is_one_line(tmp_path):
    (tmp_path / "a_file").write_text("")
    with pytest.raises(UsageError, match=r"--output_dir .*a_file/run: cannot write there"):
        main([*TINY, "--max_steps", "1", "--output_dir", str(tmp_path / "a_file" / "run")])


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_a_full_or_read_only_disk_mid_run_is_one_line_naming_the_path(tmp_path, monkeypatch, code):
    def full_disk(*args, **kwargs):
        raise OSError(code, os.strerror(code), str(tmp_path / "run" / "checkpoints" / "checkpoint-3" / "optimizer.pt"))

    monkeypatch.setattr(train_module, "run_recipe", full_disk)
    with pytest.raises(UsageError, match=rf"cannot write {tmp_path}/run/checkpoints/checkpoint-3/optimizer.pt: "):
        main([*TINY, "--max_steps", "1", "--output_dir", str(tmp_path / "run")])
    with OutputDirLock(tmp_path / "run"):  # the lock went with the failed run
        pass


# ---- the console ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("verbose", [False, True])
def test_library_info_and_the_toy_corpus_sacrebleu_warnings_only_with_verbose(caplog, logging_put_back, verbose):
    caplog.set_level(logging.INFO)
    configure_logging(SimpleNamespace(should_log=True, verbose=verbose), toy_corpus=True)
    try:
        logging.getLogger("transformers.configuration_utils").info("Model config VaswaniConfig {...}")
        logging.getLogger("sacrebleu").warning("That's 100 lines that end in a tokenized period ('.')")
        logging.getLogger("transformers.trainer").info(
            "\n\nTraining completed. Do not forget to share your model on huggingface.co/models =)\n\n"
        )
        logging.getLogger("transformers.trainer").info("***** Running training *****")
        logging.getLogger("sacrebleu").warning("some other sacreBLEU warning")
    finally:
        configure_logging(SimpleNamespace(should_log=True, verbose=True), toy_corpus=False)
    shown = caplog.text
    assert ("Model config" in shown) == verbose
    assert ("tokenized period" in shown) == verbose
    assert ("Do not forget to share" in shown) == verbose
    assert ("Running training" in shown) == verbose  # without --verbose, recipe/console.py's RunBanner says it
    assert "some other sacreBLEU warning" in shown


def test_verbose_is_a_training_argument():
    _, _, training_args = train_module.parse_arguments([*TINY, "--verbose", "True"])
    assert training_args.verbose is True


# ---- stopping early, said in one line -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["toy", "multi30k"])
def test_the_shipped_recipes_stop_by_steps_not_by_the_clock(name):
    recipe = read_recipe(find_recipe(name))  # the same command gives the same model on any machine
    assert "max_train_minutes" not in recipe and recipe["max_steps"] > 0


def test_stopped_early_line():
    budget = SimpleNamespace(stopped_at=98)
    assert stopped_early(98, 1200, budget) == (
        "stopped by --max_train_minutes after 98 of 1,200 steps: the model is undertrained"
    )
    assert stopped_early(1200, 1200, budget) is None
    assert "an early stop" in stopped_early(5, 9, None)


def test_a_run_stopped_by_its_budget_says_so_in_summary_card_and_results(tmp_path, capsys):
    """Before: the budget cut the run short and the summary, card and results.json said nothing of it."""
    output_dir = tmp_path / "run"
    results = main([*TINY, "--max_steps", "9", "--average_last_n", "0", "--max_train_minutes", "1e-9",
                    "--toy_num_test", "2", "--output_dir", str(output_dir)])  # fmt: skip
    line = "stopped by --max_train_minutes after 1 of 9 steps: the model is undertrained"
    assert results["stopped_early"] == line
    assert line in capsys.readouterr().out.splitlines()
    assert json.loads((output_dir / "results.json").read_text())["results"]["stopped_early"] == line
    assert f"**Stopped early**: {line}." in (output_dir / "README.md").read_text()


# ---- resuming a finished run, and what the card says of a resumed run ------------------------------------------------


@pytest.fixture(scope="module")
def six_step_run(tmp_path_factory) -> Path:
    output_dir = tmp_path_factory.mktemp("six")
    main([*TINY, "--max_steps", "6", "--average_last_n", "2", "--toy_num_test", "2", "--output_dir", str(output_dir)])
    return output_dir


def test_checkpoints_stay_out_of_the_uploaded_folder(six_step_run):
    """The output folder holds the model; checkpoints and the averaged copy are under checkpoints/, which the
    folder's .gitignore names (the Hub applies an uploaded .gitignore) and vaswani-push leaves out."""
    assert not list(six_step_run.glob("checkpoint-*")) and not (six_step_run / ".averaged").exists()
    assert (six_step_run / "checkpoints" / "checkpoint-6" / "optimizer.pt").is_file()
    assert (six_step_run / "checkpoints" / ".averaged" / "model.safetensors").is_file()
    assert "checkpoints/" in (six_step_run / ".gitignore").read_text().splitlines()
    files = files_to_push(six_step_run)
    assert "model.safetensors" in files and not [name for name in files if name.startswith("checkpoints")]


@pytest.mark.parametrize("how", ["finished", "killed after its last checkpoint"])
def test_resuming_at_max_steps_trains_nothing_and_keeps_the_model(six_step_run, tmp_path, how, caplog):
    """Before (and in the stock Trainer): one more step was trained, changing the final model."""
    output_dir = tmp_path / "run"
    shutil.copytree(six_step_run, output_dir)
    if how != "finished":
        for name in ("model.safetensors", "README.md", "results.json"):
            (output_dir / name).unlink()
    before = load_file(six_step_run / "model.safetensors")
    first = json.loads((six_step_run / "results.json").read_text())["results"]
    results = main([*TINY, "--max_steps", "6", "--average_last_n", "2", "--toy_num_test", "2",
                    "--output_dir", str(output_dir), "--resume_from_checkpoint", "True"])  # fmt: skip
    assert results["train_steps"] == 6 and results["resumed_from_step"] == 6
    assert [path.name for path in list_checkpoints(output_dir)] == ["checkpoint-3", "checkpoint-6"]
    after = load_file(output_dir / "model.safetensors")
    for key in before:
        assert torch.equal(after[key], before[key]), key
    assert "training is complete, nothing is trained" in caplog.text
    # The stock loader's false alarm about the tied embeddings (stored once) is not shown.
    assert "missing keys" not in caplog.text
    # The whole run's time, not the (empty) last segment's.
    assert results["train_minutes"] == pytest.approx(first["train_minutes"], abs=0.011)


def test_the_card_of_a_resumed_run_reports_the_whole_run(tmp_path):
    """Stopped at step 3 of 6, then resumed: steps and minutes are the run's, and the card says it was resumed."""
    output_dir = tmp_path / "run"
    common = [
        *TINY,
        "--max_steps",
        "6",
        "--average_last_n",
        "0",
        "--toy_num_test",
        "2",
        "--output_dir",
        str(output_dir),
    ]
    main([*common, "--max_train_minutes", "1e-9", "--save_steps", "1"])
    state = json.loads((output_dir / "checkpoints" / "checkpoint-1" / "trainer_state.json").read_text())
    first_seconds = state["stateful_callbacks"]["TrainingClock"]["args"]["seconds_before"]
    assert first_seconds > 0
    results = main([*common, "--resume_from_checkpoint", "True"])
    assert results["train_steps"] == 6 and results["resumed_from_step"] == 1
    assert results["stopped_early"] is None
    final = json.loads((output_dir / "checkpoints" / "checkpoint-6" / "trainer_state.json").read_text())
    assert final["stateful_callbacks"]["TrainingClock"]["args"]["seconds_before"] > first_seconds
    card = render_model_card(RunRecord.from_dict(json.loads((output_dir / "results.json").read_text())))
    assert "- 6 optimizer steps" in card and "resumed at step 1" in card and "Stopped early" not in card


def test_fp16_without_an_accelerator_is_refused_in_one_line(tmp_path, capsys):
    """The stock Trainer ignores --fp16 on a CPU and trains in float32 without a word."""
    import torch

    from hf_vaswani_training import cli

    if torch.accelerator.is_available():
        pytest.skip("this machine has an accelerator: --fp16 is valid here")
    status = cli.train(["toy", "--fp16", "True", "--output_dir", str(tmp_path / "run")])
    stderr = capsys.readouterr().err
    assert status == 2 and len(stderr.strip().splitlines()) == 1
    assert stderr.startswith("vaswani-train: error: --fp16 True: there is no GPU here")
    assert not (tmp_path / "run").exists()
