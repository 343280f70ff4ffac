"""training/staging.py: a staged folder is renamed into place whole, or leaves nothing; the race between ranks keeps
the first complete folder; a full disk is one line naming the destination."""

import errno
import os
import shutil
from pathlib import Path

import pytest

from hf_vaswani_training import staging
from hf_vaswani_training.staging import discard, publish, remove_stale, staged_files, staged_folder, storage_error
from hf_vaswani_training.usage import UsageError


def leftovers(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir() if path.name.startswith(staging.STAGING_PREFIX))


def test_a_staged_folder_is_renamed_into_place_when_the_block_ends(tmp_path):
    destination = tmp_path / "cache" / "tokenized-1"
    with staged_folder(destination) as folder:
        assert folder.parent == destination.parent and folder.name.startswith(".tmp-tokenized-1-")
        (folder / "meta.json").write_text("{}")
        assert not destination.exists()  # nothing under the final name while it is written
    assert (destination / "meta.json").read_text() == "{}"
    assert leftovers(destination.parent) == []


def test_an_error_leaves_neither_the_staging_folder_nor_the_destination(tmp_path):
    destination = tmp_path / "out"
    with pytest.raises(RuntimeError, match="half-way"), staged_folder(destination) as folder:
        (folder / "train.en").write_text("a\n")
        raise RuntimeError("half-way")
    assert not destination.exists()
    assert leftovers(tmp_path) == []


def test_the_race_keeps_the_folder_another_rank_renamed_in_first(tmp_path):
    destination = tmp_path / "split-1"

    def complete(found: Path) -> bool:
        return (found / "meta.json").is_file()

    with staged_folder(destination, is_complete=complete) as folder:
        (folder / "meta.json").write_text("ours")
        destination.mkdir()  # the other rank wins while we write
        (destination / "meta.json").write_text("theirs")
    assert (destination / "meta.json").read_text() == "theirs"
    assert leftovers(tmp_path) == []


def test_the_race_with_an_incomplete_winner_is_an_error(tmp_path):
    destination = tmp_path / "split-1"
    with pytest.raises(OSError), staged_folder(destination, is_complete=lambda found: False) as folder:
        (folder / "meta.json").write_text("ours")
        destination.mkdir()
        (destination / "partial").write_text("")
    assert sorted(path.name for path in destination.iterdir()) == ["partial"]  # theirs untouched, ours gone
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EROFS])
def test_a_full_disk_is_one_line_naming_the_destination_and_leaves_nothing(tmp_path, monkeypatch, code):
    destination = tmp_path / "data" / "wmt14"
    real_write_text = Path.write_text

    def write_text(self, *args, **kwargs):
        if self.name == "valid.en":
            raise OSError(code, os.strerror(code), str(self))
        return real_write_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)
    with pytest.raises(UsageError) as caught, staged_folder(destination) as folder:
        (folder / "train.en").write_text("a\n")
        (folder / "valid.en").write_text("b\n")
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"cannot write {destination}: {os.strerror(code)}")
    assert isinstance(caught.value.__cause__, OSError)
    assert not destination.exists() and leftovers(destination.parent) == []


@pytest.mark.parametrize("how", ["staged_folder", "staged_files", "staged_file"])
def test_a_full_disk_says_the_free_space_against_what_had_been_written(tmp_path, monkeypatch, how):
    """The one line gives the free space of the destination's file system and the bytes staged when it filled."""
    destination = tmp_path / "export"
    asked = []

    def disk_usage(path):
        asked.append(Path(path))
        return shutil._ntuple_diskusage(total=10**9, used=10**9 - 1_500_000, free=1_500_000)

    monkeypatch.setattr(shutil, "disk_usage", disk_usage)
    writer = {
        "staged_folder": lambda: staged_folder(destination),
        "staged_files": lambda: staged_files(destination, seal="config.json"),
        "staged_file": lambda: staging.staged_file(destination),
    }[how]
    with pytest.raises(UsageError) as caught, writer() as written:
        target = written if how == "staged_file" else written / "encoder.onnx"
        target.write_bytes(b"\0" * 3_000_000)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"cannot write {destination}: No space left on device")
    assert "1.5 MB free, more than 3.0 MB needed" in message, message
    assert asked and all(tmp_path in (path, *path.parents) for path in asked)  # the destination's file system
    assert leftovers(tmp_path) == [] and (not destination.is_dir() or leftovers(destination) == [])


def test_a_full_disk_says_the_bytes_a_writer_said_it_needed(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9, 250_000))
    error = storage_error(OSError(errno.ENOSPC, "No space left on device"), tmp_path / "out", 7_000_000)
    assert "0.2 MB free, 7.0 MB needed" in str(error)
    error = storage_error(OSError(errno.ENOSPC, "No space left on device"), tmp_path / "out")
    assert "(the disk is full: 0.2 MB free; nothing of it was kept)" in str(error)


def test_other_os_errors_are_not_turned_into_usage_errors(tmp_path):
    assert storage_error(OSError(errno.ENOSPC, "No space left on device"), tmp_path) is not None
    assert storage_error(OSError(errno.ENOENT, "No such file or directory"), tmp_path) is None
    with pytest.raises(FileNotFoundError), staged_folder(tmp_path / "out") as folder:
        (folder / "missing" / "file").write_text("")
    assert leftovers(tmp_path) == []


def test_replace_moves_the_old_folder_aside_before_the_new_one_takes_its_name(tmp_path, monkeypatch):
    destination = tmp_path / "checkpoint-2"
    destination.mkdir()
    (destination / "old").write_text("")
    renames = []
    real_replace = os.replace

    def replace(source, target):
        renames.append((Path(source).name, Path(target).name))
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", replace)
    with staged_folder(destination, replace=True, durable=True) as folder:
        (folder / "new").write_text("")
    assert sorted(path.name for path in destination.iterdir()) == ["new"]
    assert renames[0] == ("checkpoint-2", ".tmp-old-checkpoint-2")
    assert renames[1][1] == "checkpoint-2"
    assert leftovers(tmp_path) == []


def test_publish_without_replace_refuses_an_existing_folder(tmp_path):
    (tmp_path / "staged").mkdir()
    (tmp_path / "staged" / "a").write_text("")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "b").write_text("")
    with pytest.raises(OSError):
        publish(tmp_path / "staged", tmp_path / "out")
    assert publish(tmp_path / "staged", tmp_path / "out", is_complete=lambda found: True) is False
    assert not (tmp_path / "staged").exists() and sorted(p.name for p in (tmp_path / "out").iterdir()) == ["b"]


def test_discard_renames_before_deleting(tmp_path, monkeypatch):
    folder = tmp_path / "checkpoint-3"
    folder.mkdir()
    (folder / "optimizer.pt").write_text("")
    deleted = []
    monkeypatch.setattr(staging.shutil, "rmtree", lambda path, ignore_errors=False: deleted.append(Path(path).name))
    discard(folder)
    # Killed during the deletion: what is left is hidden, never a checkpoint-3 missing some files.
    assert not folder.exists() and (tmp_path / ".tmp-deleting-checkpoint-3" / "optimizer.pt").is_file()
    assert deleted[-1] == ".tmp-deleting-checkpoint-3"


def test_staged_files_move_the_seal_last_and_drop_an_old_seal_first(tmp_path, monkeypatch):
    (tmp_path / "record.json").write_text("old")
    moved = []
    real_replace = os.replace

    def replace(source, target):
        moved.append(Path(target).name)
        assert not (tmp_path / "record.json").exists() or Path(target).name == "record.json"
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", replace)
    with staged_files(tmp_path, seal="record.json") as folder:
        for name in ("record.json", "tokenizer.json", "a.txt"):
            (folder / name).write_text("new")
    assert sorted(moved[:2]) == ["a.txt", "tokenizer.json"] and moved[2:] == ["record.json"]
    assert (tmp_path / "record.json").read_text() == "new" and leftovers(tmp_path) == []


def test_an_error_in_staged_files_keeps_the_folder_as_it_was(tmp_path):
    (tmp_path / "record.json").write_text("old")
    with pytest.raises(RuntimeError), staged_files(tmp_path, seal="record.json") as folder:
        (folder / "tokenizer.json").write_text("new")
        raise RuntimeError
    assert sorted(path.name for path in tmp_path.iterdir()) == ["record.json"]


def test_remove_stale_removes_only_old_staging_folders(tmp_path):
    old, young = tmp_path / ".tmp-tokenized-a-1", tmp_path / ".tmp-tokenized-b-2"
    old.mkdir()
    young.mkdir()
    os.utime(old, (0, 0))
    remove_stale(tmp_path, "tokenized-")
    assert leftovers(tmp_path) == [young.name]
