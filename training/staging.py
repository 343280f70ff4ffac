"""Staged writing, in one place: a folder is written under a hidden `.tmp-*` name beside its destination and renamed
into place only when complete, so that a reader finds the whole folder or none of it, never half of one.

    with staged_folder(cache_root / "tokenized-1234", is_complete=cache_is_whole) as staging:
        (staging / "train.arrow").write_bytes(...)
    # here cache_root/tokenized-1234 is complete: ours, or an identical one another rank renamed in first

The writers: the tokenised-data cache (training/data/cache.py), the text cache of local corpora
(training/data/corpora.py), the tokenizer cache and a trained tokenizer (training/data/tokenizer.py),
vaswani-prepare-wmt (training/data/prepare_wmt.py), vaswani-export (training/serving/export.py,
training/serving/ctranslate2_export.py) and checkpoints (training/recipe/checkpoints.py, which adds the fsyncs a
checkpoint needs).

- `staged_folder`: a fresh staging folder, renamed into place on success, removed on any error or interrupt.
- `publish`: the rename, for a staging folder written elsewhere (several ranks write one checkpoint's files).
- `discard`: delete a folder by renaming it to a hidden name first, so a kill mid-deletion leaves nothing that looks
  like the folder.
- `staged_files`: files moved into an existing folder one by one, the file that vouches for the others last.
- `staged_file`: one file written under a hidden name and renamed into place (vaswani-translate --output).
- Disk full, quota exceeded, read-only or not writable (`FULL_OR_READ_ONLY`, or a writer's own words for a full disk:
  torch's zip writer, safetensors): the staging folder is removed and the error is one `UsageError` naming the
  destination and, for a full disk, the free space against what the write needed (`storage_error`).
- Published files get the user's mode (`apply_user_mode`: 0o666 less the umask), not the 0600 of safetensors' writer.

Names starting with `.tmp-` (`STAGING_PREFIX`) are never read as results: every reader looks for the final name, and
the hidden name keeps them out of an upload. A rename is atomic within one file system, which is why the staging
folder is always beside its destination, never in /tmp. Only `durable=True` (checkpoints) flushes to disk before the
rename; without it, a machine crash (not a killed process) can leave a cut file behind the final name, and the caches
check their files when they open them.

Standard library only, and of this package only the ground floor (training/usage.py): every wing may import it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from .usage import UsageError

STAGING_PREFIX = ".tmp-"
# Disk full, quota exceeded, no permission, read-only file system: a fault of the place, not a bug.
FULL_OR_READ_ONLY = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS})

PathLike = str | os.PathLike


def staging_name(destination: PathLike, role: str = "") -> Path:
    """The fixed hidden name `.tmp-{role}{name}` beside `destination`: where writers that must agree on the staging
    folder (every rank writes into one checkpoint's) write it, and where `publish` and `discard` move a folder aside
    (`role` "old-", "deleting-")."""
    destination = Path(destination)
    return destination.parent / f"{STAGING_PREFIX}{role}{destination.name}"


def storage_error(
    error: BaseException,
    destination: PathLike,
    needed_bytes: int | None = None,
    *,
    written_bytes: int | None = None,
) -> UsageError | None:
    """The one-line UsageError for a write that failed through the place's fault, naming `destination`; None for any
    other error (a bug, shown with its traceback).

    The place's fault: an OSError in `FULL_OR_READ_ONLY`, or a writer that reports a full disk in its own words
    (`disk_full_in_words`): torch's zip writer (torch.save: optimizer.pt, scheduler.pt) raises a RuntimeError
    "unexpected pos N vs M" for a short write, counted as a full disk only when the disk is nearly full
    (`disk_is_nearly_full`), so that a real bug is not misnamed; safetensors' SafetensorError names os error 28.
    A full disk is said with the free space on `destination`'s file system (`shutil.disk_usage`) against what the
    write needed: `needed_bytes` when the writer knows it, else more than `written_bytes`, what had been written (or
    staged) when the disk filled; each left out when unknown."""
    if isinstance(error, OSError) and error.errno in FULL_OR_READ_ONLY:
        reason = error.strerror or os.strerror(error.errno)
        full = error.errno in (errno.ENOSPC, errno.EDQUOT)
    elif not isinstance(error, OSError) and disk_full_in_words(error, destination, needed_bytes):
        reason, full = "No space left on device", True
    else:
        return None
    if full:
        return UsageError(
            f"cannot write {destination}: {reason} (the disk is full: {_space(destination, needed_bytes, written_bytes)}"
            "; nothing of it was kept); free some space, or write somewhere else"
        )
    return UsageError(
        f"cannot write {destination}: {reason} (nothing of it was kept); make {Path(destination).parent} writable, "
        "or write somewhere else"
    )


# How writers that do not raise OSError say that a write came up short: torch's zip writer (PyTorchStreamWriter),
# safetensors (an io::Error in its message).
_SHORT_WRITE_WORDS = ("unexpected pos", "file write failed")
_DISK_FULL_WORDS = ("os error 28", "no space left on device", "storagefull", "os error 122", "quota exceeded")
NEARLY_FULL_BYTES = 64 * 1024 * 1024  # below this much free space a short write is taken for a full disk


def disk_full_in_words(error: BaseException, destination: PathLike, needed_bytes: int | None = None) -> bool:
    """True when `error` (not an OSError) is a writer's report of a full disk: its message names one, or it reports
    a short write while the disk holding `destination` is nearly full."""
    message = str(error).lower()
    if any(words in message for words in _DISK_FULL_WORDS):
        return True
    return any(words in message for words in _SHORT_WRITE_WORDS) and disk_is_nearly_full(destination, needed_bytes)


def disk_is_nearly_full(destination: PathLike, needed_bytes: int | None = None) -> bool:
    """Free space where `destination` is written is under `NEARLY_FULL_BYTES` (or under `needed_bytes`)."""
    free = free_bytes(destination)
    return free is not None and free < max(NEARLY_FULL_BYTES, needed_bytes or 0)


def free_bytes(destination: PathLike) -> int | None:
    """Free bytes on the file system of `destination` (its nearest existing folder), None when unknown."""
    folder = Path(destination).absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def _space(destination: PathLike, needed_bytes: int | None, written_bytes: int | None = None) -> str:
    free = free_bytes(destination)
    words = f"{_megabytes(free)} free" if free is not None else "free space unknown"
    if needed_bytes:
        return f"{words}, {_megabytes(needed_bytes)} needed"
    if written_bytes:
        return f"{words}, more than {_megabytes(written_bytes)} needed ({_megabytes(written_bytes)} written when it filled)"
    return words


def bytes_under(path: PathLike | None) -> int | None:
    """Bytes in the files at `path` (a file, or a folder and everything under it): what a write had put there when it
    failed; None when there is nothing to count."""
    if path is None:
        return None
    path = Path(path)
    try:
        if not path.is_dir():
            return path.lstat().st_size
        total = 0
        for root, _, names in os.walk(path):
            for name in names:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(root, name)).st_size
        return total
    except OSError:
        return None


def _megabytes(count: int) -> str:
    return f"{count / 1e6:,.1f} MB"


def user_file_mode() -> int:
    """The mode a file the user creates gets: 0o666 less the umask. (Read by setting it, the only way there is.)"""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def apply_user_mode(path: PathLike) -> None:
    """Give every file under `path` (a folder, or one file) the user's mode (`user_file_mode`): safetensors and
    mkstemp write 0600, which a web server or another user serving the folder cannot read."""
    mode = user_file_mode()
    path = Path(path)
    files = [path] if path.is_file() else [Path(root) / name for root, _, names in os.walk(path) for name in names]
    for file in files:
        with contextlib.suppress(OSError):
            os.chmod(file, mode)


@contextlib.contextmanager
def staged_folder(
    destination: PathLike,
    *,
    is_complete: Callable[[Path], bool] | None = None,
    replace: bool = False,
    durable: bool = False,
) -> Iterator[Path]:
    """Yield a new, empty staging folder beside `destination` (`.tmp-{name}-XXXXXXXX`); when the block ends without
    an error, rename it to `destination` (`publish`, whose arguments these are). On any error, or an interrupt, the
    staging folder is removed and the error raised again: a full or read-only disk as `storage_error`'s one line.
    """
    destination = Path(destination)
    staging = None
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{destination.name}-", dir=destination.parent))
        yield staging
        publish(staging, destination, is_complete=is_complete, replace=replace, durable=durable)
    except BaseException as error:
        # Judged before the staging folder goes: a short write is a full disk only while the disk is still full.
        usage_error = (
            storage_error(error, destination, written_bytes=bytes_under(staging))
            if isinstance(error, Exception)
            else None
        )
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if usage_error is not None:
            raise usage_error from error
        raise


def publish(
    staging: PathLike,
    destination: PathLike,
    *,
    is_complete: Callable[[Path], bool] | None = None,
    replace: bool = False,
    durable: bool = False,
) -> bool:
    """Rename the finished folder `staging` to `destination`; True when it is in place, False when another's was kept.

    - `replace=False`: `destination` must not exist. The race between ranks (or processes) that build the same
      folder at once: each writes its own staging folder, and the first rename wins. A later one fails because
      `destination` exists; when `is_complete(destination)` says the winner's folder is whole, it is kept and ours
      removed (the two hold the same thing: the name is a hash of what is in it), otherwise the error is raised.
    - `replace=True`: an existing `destination` is renamed aside to `.tmp-old-{name}` first (a rename cannot replace
      a non-empty folder), ours takes its name, then the old one is deleted. Until the second rename a reader finds
      the older complete copy, never a partial one.
    - `durable=True`: every file and folder of `staging` is flushed to disk before the rename, and the parent folder
      after it, so that even a machine crash leaves the complete new folder, the complete old one, or neither.
    """
    staging, destination = Path(staging), Path(destination)
    apply_user_mode(staging)  # model files with the user's umask, as any other file the user writes
    if durable:
        # A rename is only atomic for what has reached the disk: flush the files, then the folders holding them.
        for root, _, files in os.walk(staging):
            for name in files:
                _fsync(os.path.join(root, name))
        for root, _, _ in os.walk(staging, topdown=False):
            _fsync(root, directory=True)
    if replace and os.path.lexists(destination):
        retired = staging_name(destination, "old-")
        shutil.rmtree(retired, ignore_errors=True)
        os.replace(destination, retired)
        os.replace(staging, destination)
        shutil.rmtree(retired, ignore_errors=True)
    else:
        try:
            os.replace(staging, destination)  # atomic: the folder appears complete or not at all
        except OSError:
            if is_complete is None or not is_complete(destination):
                raise
            shutil.rmtree(staging, ignore_errors=True)  # another rank renamed the same folder in first: theirs stays
            return False
    if durable:
        _fsync(os.path.dirname(os.path.abspath(destination)), directory=True)
    return True


def discard(folder: PathLike) -> None:
    """Delete `folder` by renaming it to `.tmp-deleting-{name}` first: a kill during the deletion then leaves a hidden
    folder nothing reads (and `remove_stale` or the next writer removes), never a `folder` that lost some files and
    still looks whole."""
    doomed = staging_name(folder, "deleting-")
    shutil.rmtree(doomed, ignore_errors=True)
    os.replace(folder, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


@contextlib.contextmanager
def staged_files(folder: PathLike, seal: str) -> Iterator[Path]:
    """Yield a staging folder inside `folder` (which may hold other things: a model folder); when the block ends
    without an error, move each file written there into `folder`, replacing files of the same name.

    `seal` is the file that vouches for the others (a record of how they were made): the old one is removed before
    the first file moves and the new one moves last, so a run killed on the way leaves either the complete new set
    with its seal, or files without a seal, which a reader refuses instead of trusting. Errors as `staged_folder`.
    """
    folder = Path(folder)
    staging = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}files-", dir=folder))
        yield staging
        apply_user_mode(staging)
        (folder / seal).unlink(missing_ok=True)  # an old seal must not vouch for new files
        for name in sorted(os.listdir(staging), key=lambda name: name == seal):
            os.replace(staging / name, folder / name)
    except BaseException as error:
        usage_error = (
            storage_error(error, folder, written_bytes=bytes_under(staging)) if isinstance(error, Exception) else None
        )
        if usage_error is not None:
            raise usage_error from error
        raise
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def staged_file(destination: PathLike) -> Iterator[Path]:
    """Yield a hidden file name `.tmp-{name}-XXXXXXXX` beside `destination` to write; when the block ends without an
    error it gets the user's mode and is renamed to `destination` (replacing it), so that a reader finds the whole
    new file or the old one, never a cut one. On any error it is removed; errors as `staged_folder`."""
    destination = Path(destination)
    staging = None
    try:
        handle, name = tempfile.mkstemp(prefix=f"{STAGING_PREFIX}{destination.name}-", dir=destination.parent)
        os.close(handle)
        staging = Path(name)
        yield staging
        apply_user_mode(staging)
        os.replace(staging, destination)
        staging = None
    except BaseException as error:
        usage_error = (
            storage_error(error, destination, written_bytes=bytes_under(staging))
            if isinstance(error, Exception)
            else None
        )
        if usage_error is not None:
            raise usage_error from error
        raise
    finally:
        if staging is not None:
            with contextlib.suppress(OSError):
                staging.unlink()


def remove_stale(parent: PathLike, name_prefix: str, older_than_s: float = 24 * 3600) -> None:
    """Remove staging folders `.tmp-{name_prefix}*` in `parent` left by runs killed long ago: only those untouched for
    `older_than_s` (a day), since a younger one may be another process's build in progress."""
    now = time.time()
    for path in Path(parent).glob(f"{STAGING_PREFIX}{name_prefix}*"):
        with contextlib.suppress(OSError):
            if now - path.stat().st_mtime > older_than_s:
                shutil.rmtree(path, ignore_errors=True)


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
