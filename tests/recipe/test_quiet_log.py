"""One quiet log (issue 26, point 4): a training run written to a file shows our own lines only, in one format, and
the other commands log in the same format (training/console.py).

The commands run as a user runs them, as console scripts in subprocesses with their output sent to a file (not a
terminal): no library INFO line, no Trainer banner or checkpoint line, no progress bar and so no carriage return.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, TINY

LOG_LINE = re.compile(r"^\d\d:\d\d:\d\d (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: ")
# What a log line of any format starts with: a level, with or without a time before it.
LOOKS_LIKE_LOG = re.compile(r"^(\S+ ){0,2}(DEBUG|INFO|WARNING|ERROR|CRITICAL)\b")


def _script(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def _run(command: list[str], log: Path) -> str:
    with log.open("w") as out:  # a file, not a terminal
        completed = subprocess.run(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO_ROOT, timeout=600
        )
    text = log.read_text()
    assert completed.returncode == 0, text[-4000:]
    return text


def _log_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if LOOKS_LIKE_LOG.match(line)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    work = tmp_path_factory.mktemp("quiet")
    run = work / "run"
    argv = [*TINY, "--max_steps", "3", "--output_dir", str(run), "--num_samples_to_print", "1"]
    text = _run([_script("vaswani-train"), *argv], work / "train.log")
    return work, run, text


def test_a_training_run_in_a_file_shows_our_lines_only(trained):
    _, _, text = trained
    for noise in ("INFO transformers", "Running training", "Saving model checkpoint", "Loading weights", "\r"):
        assert noise not in text, f"{noise!r} in the log:\n{text[-3000:]}"
    assert "Writing model shards" not in text and "Translating" not in text  # no progress bar in a file
    assert "{'loss'" not in text  # the stock printer's dicts are replaced by the progress lines
    # our own lines: the run's one-line start (with the real, fractional epoch count), progress, the summary
    assert re.search(r"recipe\.console: training 3 steps from step 0 \(0\.\d\d epochs of 400 examples", text), text
    assert re.search(r"step 3 of 3 \(100%\): [\d.]+ s and [\d.]+ CPU-s a step", text), text
    assert "Model written to" in text and "test: sacreBLEU" in text


def test_every_command_logs_in_one_format(trained):
    work, run, train_text = trained
    averaged = work / "averaged"
    average_text = _run(
        [_script("vaswani-average"), "--run-dir", str(run), "--last", "1", "--output", str(averaged)],
        work / "average.log",
    )
    translate_text = _run([_script("vaswani-translate"), str(run), "A dog runs .", "--threads", "1"], work / "tr.log")
    for name, text in (("train", train_text), ("average", average_text), ("translate", translate_text)):
        lines = _log_lines(text)
        assert lines or name == "translate", f"vaswani-{name} logged nothing:\n{text}"
        for line in lines:
            assert LOG_LINE.match(line), f"vaswani-{name}: {line!r} is not in the one format"
    assert any("Reading" in line for line in _log_lines(average_text))
