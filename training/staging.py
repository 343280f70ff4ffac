"""Staged writing, in one place: a folder is written under a hidden `.tmp-*` name beside its destination and renamed
into place only when complete, so that a reader finds the whole folder or none of it, never half of one.

    with staged_folder(cache_root / "tokenized-1234", is_complete=cache_is_whole) as staging:
        (staging / "train.arrow").write_bytes(...)
    # here cache_root/tokenized-1234 is complete: ours, or an identical one another rank renamed in first

The writers: the tokenised-data cache (training/data/cache.py), the text cache of local corpora
(training/data/corpora.py), the tokenizer cache and a trained tokenizer (training/data/tokenizer.py),
vaswani-prepare-wmt (training/data/prepare_wmt.py) and checkpoints (training/recipe/checkpoints.py, which adds the
fsyncs a checkpoint needs).

- `staged_folder`: a fresh staging folder, renamed into place on success, removed on any error or interrupt.
- `publish`: the rename, for a staging folder written elsewhere (several ranks write one checkpoint's files).
- `discard`: delete a folder by renaming it to a hidden name first, so a kill mid-deletion leaves nothing that looks
  like the folder.
- `staged_files`: files moved into an existing folder one by one, the file that vouches for the others last.
- Disk full, quota exceeded, read-only or not writable (`FULL_OR_READ_ONLY`): the staging folder is removed and the
  error is one `UsageError` naming the destination (`storage_error`).

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


def storage_error(error: OSError, destination: PathLike) -> UsageError | None:
    """The one-line UsageError for an OSError that is the place's fault (`FULL_OR_READ_ONLY`), naming `destination`;
    None for any other error (a bug, shown with its traceback)."""
    if error.errno not in FULL_OR_READ_ONLY:
        return None
    reason = error.strerror or os.strerror(error.errno)
    return UsageError(
        f"cannot write {destination}: {reason} (nothing of it was kept); free some space or make "
        f"{Path(destination).parent} writable, or write somewhere else"
    )


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
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        usage_error = storage_error(error, destination) if isinstance(error, OSError) else None
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
        (folder / seal).unlink(missing_ok=True)  # an old seal must not vouch for new files
        for name in sorted(os.listdir(staging), key=lambda name: name == seal):
            os.replace(staging / name, folder / name)
    except BaseException as error:
        usage_error = storage_error(error, folder) if isinstance(error, OSError) else None
        if usage_error is not None:
            raise usage_error from error
        raise
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


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
