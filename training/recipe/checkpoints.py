"""What a checkpoint is, in one place: its name, what makes it complete, and how a folder is written so that a
crash never leaves a half-written one under its final name.

Used by the trainer (saving and resuming) and by checkpoint averaging (picking the last checkpoints of a run).

- Name: `checkpoint-STEP`, the stock Trainer's (`PREFIX_CHECKPOINT_DIR`), ordered by the number STEP.
- Complete: `trainer_state.json` is present and parses, and every `*.safetensors` file is whole:
  its header reads and its tensors end at the end of the file (`checkpoint_problem`, the same header check as
  the CLIs' `cli.check_safetensors`). The Trainer writes `trainer_state.json` last, so its presence means the
  weights, optimizer, scheduler and RNG states before it were written too; the header check catches truncated
  weights.
- Written safely: into a hidden staging folder, flushed to disk, then renamed (`publish`). The staging name
  does not match `checkpoint-STEP`, so neither resuming, rotation nor averaging ever sees it, and it is hidden,
  so training/push.py leaves it out of an upload.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path

from ..usage import safetensors_problem

# The Trainer's names (transformers.trainer_utils.PREFIX_CHECKPOINT_DIR, transformers.trainer.TRAINER_STATE_NAME),
# spelled out so that this module, and vaswani-average's argument checks with it, load no torch; a test holds them
# equal to the installed release's.
PREFIX_CHECKPOINT_DIR = "checkpoint"
TRAINER_STATE_NAME = "trainer_state.json"

logger = logging.getLogger(__name__)

CHECKPOINT_NAME = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")
STAGING_PREFIX = ".tmp-"


def checkpoint_name(step: int) -> str:
    """`checkpoint-STEP`, the folder name of the checkpoint saved at optimizer step `step`."""
    return f"{PREFIX_CHECKPOINT_DIR}-{step}"


def list_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """Every `checkpoint-STEP` folder of `run_dir`, complete or not, by step number (`-9` before `-10`)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = []
    for path in run_dir.iterdir():
        match = CHECKPOINT_NAME.match(path.name)
        if match is not None and path.is_dir():
            found.append((int(match.group(1)), path))
    return [path for _, path in sorted(found)]


def checkpoint_problem(checkpoint_dir: str | os.PathLike) -> str | None:
    """Why `checkpoint_dir` is not a complete checkpoint, or None when it is.

    safetensors has no checksum, so flipped bits inside the tensor data are not detected.
    """
    checkpoint_dir = Path(checkpoint_dir)
    if not checkpoint_dir.is_dir():
        return f"{checkpoint_dir} is not a directory"
    state_file = checkpoint_dir / TRAINER_STATE_NAME
    if not state_file.is_file():
        return f"{state_file} is missing (the Trainer writes it last: the save was interrupted)"
    try:
        json.loads(state_file.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        return f"{state_file} is not valid JSON ({error})"
    for weights_file in sorted(checkpoint_dir.glob("*.safetensors")):
        problem = safetensors_problem(weights_file)
        if problem is not None:
            return problem
    return None


def last_complete_checkpoints(run_dir: str | os.PathLike, n: int) -> list[Path]:
    """The last `n` complete checkpoints of `run_dir`, oldest first (fewer when the run has fewer).

    Incomplete folders newer than the oldest one returned are skipped with a warning naming what is wrong.
    """
    found: list[Path] = []
    for path in reversed(list_checkpoints(run_dir)):
        if len(found) == n:
            break
        problem = checkpoint_problem(path)
        if problem is None:
            found.append(path)
        else:
            logger.warning("Skipping incomplete checkpoint %s: %s", path, problem)
    return found[::-1]


def last_complete_checkpoint(run_dir: str | os.PathLike) -> str | None:
    """A drop-in for `transformers.trainer_utils.get_last_checkpoint` that skips incomplete checkpoints."""
    found = last_complete_checkpoints(run_dir, 1)
    return str(found[0]) if found else None


# ---- writing a folder safely ----------------------------------------------------------------------------------------


def staging_dir_for(output_dir: str | os.PathLike) -> Path:
    """The hidden folder next to `output_dir` where it is written before `publish` renames it into place."""
    output_dir = Path(output_dir)
    return output_dir.parent / f"{STAGING_PREFIX}{output_dir.name}"


def stale_staging_dirs(run_dir: str | os.PathLike) -> list[Path]:
    """Staging folders of checkpoints left in `run_dir` by a save that was interrupted."""
    return sorted(Path(run_dir).glob(f"{STAGING_PREFIX}*{PREFIX_CHECKPOINT_DIR}-*"))


def _fsync(path: str, directory: bool = False) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        if directory:
            return  # folders cannot be opened on Windows; there the rename is what makes the entries visible
        raise
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(staging_dir: str | os.PathLike, output_dir: str | os.PathLike) -> None:
    """Rename the finished `staging_dir` to `output_dir` after flushing it to disk, replacing an older copy.

    A crash at any point leaves either the complete new `output_dir`, the complete old one, or none.
    """
    staging_dir, output_dir = str(staging_dir), str(output_dir)
    # A rename is only atomic for what has reached the disk: flush the files, then the folders holding them.
    for root, _, files in os.walk(staging_dir):
        for name in files:
            _fsync(os.path.join(root, name))
    for root, _, _ in os.walk(staging_dir, topdown=False):
        _fsync(root, directory=True)
    if os.path.exists(output_dir):
        # A rename cannot replace a non-empty folder, so the old one moves aside first (its hidden name is seen by
        # nothing). Until the second rename, a reader finds the older complete copy, never a partial one.
        retired_dir = os.path.join(os.path.dirname(output_dir), f"{STAGING_PREFIX}old-{os.path.basename(output_dir)}")
        shutil.rmtree(retired_dir, ignore_errors=True)
        os.replace(output_dir, retired_dir)
        os.replace(staging_dir, output_dir)
        shutil.rmtree(retired_dir, ignore_errors=True)
    else:
        os.replace(staging_dir, output_dir)
    _fsync(os.path.dirname(os.path.abspath(output_dir)), directory=True)
