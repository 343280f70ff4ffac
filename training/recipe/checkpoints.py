"""What a checkpoint is, in one place: its name, what makes it complete, and how a folder is written so that a
crash never leaves a half-written one under its final name.

Used by the trainer (saving and resuming) and by checkpoint averaging (picking the last checkpoints of a run).

- Name: `checkpoint-STEP`, the stock Trainer's (`PREFIX_CHECKPOINT_DIR`), ordered by the number STEP.
- Where: in the `checkpoints/` subfolder of the run's output folder (`checkpoints_dir`), so that the output folder
  holds the final model and nothing else a user would upload; the folder's `.gitignore` (`write_upload_ignore`)
  lists it, and the Hub applies an uploaded `.gitignore`, so `hf upload OUTPUT_DIR` skips it too. Runs of older
  versions kept them in the output folder itself; both places are read.
- Complete: `trainer_state.json` is present and parses, the weights are there (`model.safetensors`, or a sharded
  index) and every `*.safetensors` file is whole: its header reads and its tensors end at the end of the file
  (`checkpoint_problem`, the same header check as the CLIs' `cli.check_safetensors`); and when the checkpoint
  holds resume state at all (or is resumed from), every file of it: `optimizer.pt`, `scheduler.pt` and
  `rng_state*.pth`. A folder that lost some files (a deletion cut short) is not complete, whatever it still holds.
- Written safely: into a hidden staging folder, flushed to disk, then renamed (`publish`, training/staging.py's
  `publish` with its fsyncs and the older copy renamed aside). The staging name does not match `checkpoint-STEP`,
  so neither resuming, rotation nor averaging ever sees it, and it is hidden, so training/push.py leaves it out of
  an upload.
- Locked (`OutputDirLock`): one run writes an output folder at a time; a second is refused naming the holder.
- Deleted safely (`rotate_checkpoints`): renamed to a hidden `.tmp-deleting-checkpoint-STEP` first, then removed,
  so a kill during the deletion leaves a folder nothing reads (and the next run removes), never a partial
  `checkpoint-STEP`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from pathlib import Path

from .. import staging
from ..staging import STAGING_PREFIX
from ..usage import UsageError, safetensors_problem

# The Trainer's names (transformers.trainer_utils.PREFIX_CHECKPOINT_DIR, transformers.trainer.TRAINER_STATE_NAME),
# spelled out so that this module, and vaswani-average's argument checks with it, load no torch; a test holds them
# equal to the installed release's.
PREFIX_CHECKPOINT_DIR = "checkpoint"
TRAINER_STATE_NAME = "trainer_state.json"

logger = logging.getLogger(__name__)

CHECKPOINT_NAME = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")
CHECKPOINTS_SUBDIR = "checkpoints"
AVERAGED_SUBDIR = ".averaged"
# What `hf upload OUTPUT_DIR` and git leave out of a run's output folder (written there as .gitignore).
UPLOAD_IGNORE = (f"{CHECKPOINTS_SUBDIR}/", "runs/", ".vaswani-train.lock")


def checkpoint_name(step: int) -> str:
    """`checkpoint-STEP`, the folder name of the checkpoint saved at optimizer step `step`."""
    return f"{PREFIX_CHECKPOINT_DIR}-{step}"


def checkpoints_dir(output_dir: str | os.PathLike) -> Path:
    """Where a run writing to `output_dir` keeps its `checkpoint-STEP` folders: `output_dir/checkpoints`."""
    return Path(output_dir) / CHECKPOINTS_SUBDIR


def write_upload_ignore(output_dir: str | os.PathLike) -> Path:
    """`output_dir/.gitignore` naming what is not part of the model (checkpoints, logs, the lock): `hf upload`
    sends an uploaded .gitignore along and the Hub skips the files it matches; git does the same."""
    path = Path(output_dir) / ".gitignore"
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    missing = [pattern for pattern in UPLOAD_IGNORE if pattern not in lines]
    if missing:
        path.write_text("\n".join([*lines, *missing]) + "\n", encoding="utf-8")
    return path


def list_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """Every `checkpoint-STEP` folder of `run_dir` (in its `checkpoints/` subfolder, or in `run_dir` itself as
    older versions wrote them, or `run_dir` being that subfolder), complete or not, by step number (`-9` before
    `-10`); a step in both places is taken from `checkpoints/`."""
    run_dir = Path(run_dir)
    found: dict[int, Path] = {}
    for folder in (run_dir, checkpoints_dir(run_dir)):
        if not folder.is_dir():
            continue
        for path in folder.iterdir():
            match = CHECKPOINT_NAME.match(path.name)
            if match is not None and path.is_dir():
                found[int(match.group(1))] = path
    return [found[step] for step in sorted(found)]


def _resume_state_problem(checkpoint_dir: Path) -> str | None:
    """Which file of the Trainer's resume state is missing: optimizer, scheduler, RNG (DeepSpeed keeps the first
    two in its own global_step* folder)."""
    deepspeed = any(checkpoint_dir.glob("global_step*"))
    if not deepspeed and not any(checkpoint_dir.glob("optimizer*")):
        return f"{checkpoint_dir / 'optimizer.pt'} is missing"
    if not deepspeed and not (checkpoint_dir / "scheduler.pt").is_file():
        return f"{checkpoint_dir / 'scheduler.pt'} is missing"
    if not any(checkpoint_dir.glob("rng_state*.pth")):
        return f"{checkpoint_dir / 'rng_state.pth'} is missing"
    return None


def checkpoint_problem(checkpoint_dir: str | os.PathLike, resumable: bool = False) -> str | None:
    """Why `checkpoint_dir` is not a complete checkpoint, or None when it is.

    A checkpoint written with resume state (the Trainer's default) needs all of it; one without any (a
    --save_only_model run) is complete for averaging, and `resumable=True` asks for the resume state as well.
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
    weights = sorted(checkpoint_dir.glob("*.safetensors"))
    sharded = any(checkpoint_dir.glob("*.safetensors.index.json"))
    if not weights and not sharded and not any(checkpoint_dir.glob("global_step*")):
        return f"{checkpoint_dir / 'model.safetensors'} is missing"
    for weights_file in weights:
        problem = safetensors_problem(weights_file)
        if problem is not None:
            return problem
    has_resume_state = any(
        any(checkpoint_dir.glob(pattern)) for pattern in ("optimizer*", "scheduler.pt", "rng_state*.pth")
    )
    if resumable or has_resume_state:
        problem = _resume_state_problem(checkpoint_dir)
        if problem is not None:
            return f"{problem} (the save or a deletion was cut short)"
    return None


def last_complete_checkpoints(run_dir: str | os.PathLike, n: int, resumable: bool = False) -> list[Path]:
    """The last `n` complete checkpoints of `run_dir`, oldest first (fewer when the run has fewer).

    Incomplete folders newer than the oldest one returned are skipped with a warning naming what is wrong.
    """
    found: list[Path] = []
    for path in reversed(list_checkpoints(run_dir)):
        if len(found) == n:
            break
        problem = checkpoint_problem(path, resumable=resumable)
        if problem is None:
            found.append(path)
        else:
            logger.warning("Skipping incomplete checkpoint %s: %s", path, problem)
    return found[::-1]


def last_complete_checkpoint(run_dir: str | os.PathLike) -> str | None:
    """A drop-in for `transformers.trainer_utils.get_last_checkpoint` that skips incomplete checkpoints: the last
    one a run can resume from (weights, trainer state, optimizer, scheduler and RNG states all there)."""
    found = last_complete_checkpoints(run_dir, 1, resumable=True)
    return str(found[0]) if found else None


def checkpoint_step(checkpoint_dir: str | os.PathLike) -> int:
    """The optimizer step a checkpoint was saved at, as its trainer_state.json records it."""
    state = json.loads((Path(checkpoint_dir) / TRAINER_STATE_NAME).read_text(encoding="utf-8"))
    return int(state.get("global_step", 0))


def rotate_checkpoints(run_dir: str | os.PathLike, save_total_limit: int | None, keep: str | None = None) -> None:
    """`transformers.trainer_utils.rotate_checkpoints` (keep the newest `save_total_limit`, never the last one or
    `keep`, the best), ordered by step, with each folder renamed to a hidden name before it is deleted: a kill during
    `rmtree` then leaves `.tmp-deleting-checkpoint-N`, which nothing reads and the next run removes, instead of a
    `checkpoint-N` that lost its scheduler and RNG states and still looked resumable."""
    if not save_total_limit or save_total_limit <= 0:
        return
    checkpoints = list_checkpoints(run_dir)
    protected = {checkpoints[-1].resolve()} if checkpoints else set()
    if keep is not None:
        protected.add(Path(keep).resolve())
    remaining = len(checkpoints)
    for checkpoint in checkpoints:
        if remaining <= max(save_total_limit, len(protected)):
            break
        if checkpoint.resolve() in protected:
            continue
        staging.discard(checkpoint)
        remaining -= 1


# ---- the output folder's lock ---------------------------------------------------------------------------------------

LOCK_NAME = ".vaswani-train.lock"


class OutputDirLock:
    """An exclusive `fcntl.flock` on `output_dir/.vaswani-train.lock`, held by the run writing that folder.

    A second run into the same folder is a UsageError naming the folder and the PID that holds it. The kernel
    drops the lock when its process ends, however it ends, so a lock file left by a dead run blocks nothing.
    Where there is no `fcntl` (Windows) nothing is locked.
    """

    def __init__(self, output_dir: str | os.PathLike):
        self.path = Path(output_dir) / LOCK_NAME
        self.fd: int | None = None
        self.created_dir = False

    def __enter__(self) -> OutputDirLock:
        try:
            import fcntl
        except ImportError:
            return self
        try:
            self.created_dir = not self.path.parent.exists()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise UsageError(
                f"--output_dir {self.path.parent}: cannot write there ({error.strerror}); choose a writable folder"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise UsageError(
                f"--output_dir {self.path.parent} is being written by another training run (PID {holder}, holding "
                f"{self.path}); wait for it to finish or choose another --output_dir"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd
        return self

    def __exit__(self, *exc_info) -> None:
        if self.fd is not None:
            import fcntl

            # Removed while still held (a run that opens it now finds the lock taken, or no file), and the folder
            # too when this run created it and a refusal before any work left it empty: nothing written, nothing left.
            with contextlib.suppress(OSError):
                self.path.unlink()
            if self.created_dir:
                with contextlib.suppress(OSError):
                    self.path.parent.rmdir()  # only if empty
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


# ---- writing a folder safely ----------------------------------------------------------------------------------------


def staging_dir_for(output_dir: str | os.PathLike) -> Path:
    """The hidden folder `.tmp-NAME` next to `output_dir` where it is written before `publish` renames it into place:
    a fixed name, since every rank writes its part of a checkpoint into the same folder."""
    return staging.staging_name(output_dir)


def stale_staging_dirs(run_dir: str | os.PathLike) -> list[Path]:
    """Staging folders of checkpoints left in `run_dir` (or its `checkpoints/`) by a save or deletion cut short."""
    pattern = f"{STAGING_PREFIX}*{PREFIX_CHECKPOINT_DIR}-*"
    return sorted([*Path(run_dir).glob(pattern), *checkpoints_dir(run_dir).glob(pattern)])


def publish(staging_dir: str | os.PathLike, output_dir: str | os.PathLike) -> None:
    """Rename the finished `staging_dir` to `output_dir` after flushing it to disk, replacing an older copy.

    A crash at any point leaves either the complete new `output_dir`, the complete old one, or none
    (training/staging.py's `publish` with `replace=True, durable=True`).
    """
    staging.publish(staging_dir, output_dir, replace=True, durable=True)
