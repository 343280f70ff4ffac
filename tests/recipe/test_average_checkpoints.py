"""Checkpoint averaging on tiny fake Trainer checkpoints."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import hf_vaswani_training.recipe.average_checkpoints as average_module
from hf_vaswani_training.recipe.average_checkpoints import WEIGHTS_NAME, average_checkpoints, last_checkpoints
from hf_vaswani_training.recipe.checkpoints import last_complete_checkpoint
from tests.conftest import REPO_ROOT


def make_checkpoint(directory: Path, tensors: dict[str, torch.Tensor], step: int = 0) -> Path:
    """A Trainer-like checkpoint folder: weights, config, and the resume state that must not be copied."""
    directory.mkdir(parents=True)
    save_file(tensors, directory / WEIGHTS_NAME, metadata={"format": "pt"})
    (directory / "config.json").write_text(json.dumps({"model_type": "vaswani", "step": step}))
    (directory / "generation_config.json").write_text(json.dumps({"num_beams": 4}))
    (directory / "optimizer.pt").write_bytes(b"optimizer state")
    (directory / "scheduler.pt").write_bytes(b"scheduler state")
    (directory / "rng_state.pth").write_bytes(b"rng state")
    (directory / "trainer_state.json").write_text("{}")
    (directory / "training_args.bin").write_bytes(b"args")
    return directory


def tensors_a() -> dict[str, torch.Tensor]:
    return {
        "model.shared.weight": torch.tensor([[1.0, 2.0], [-4.0, 0.5]]),
        "model.layer_norm.weight": torch.tensor([1.0, 2.0], dtype=torch.bfloat16),
        "model.big.weight": torch.tensor([60000.0, -60000.0], dtype=torch.float16),
        "model.steps": torch.tensor([7, 8], dtype=torch.int64),
    }


def tensors_b() -> dict[str, torch.Tensor]:
    return {
        "model.shared.weight": torch.tensor([[3.0, 5.0], [0.0, 0.25]]),
        "model.layer_norm.weight": torch.tensor([2.0, 4.0], dtype=torch.bfloat16),
        "model.big.weight": torch.tensor([60000.0, -60000.0], dtype=torch.float16),
        "model.steps": torch.tensor([7, 8], dtype=torch.int64),
    }


def test_average_of_two_checkpoints(tmp_path: Path) -> None:
    first = make_checkpoint(tmp_path / "checkpoint-1", tensors_a(), step=1)
    last = make_checkpoint(tmp_path / "checkpoint-2", tensors_b(), step=2)
    (last / "tokenizer.json").write_text("{}")
    (last / "modeling_vaswani.py").write_text("# remote code\n")

    output = average_checkpoints([first, last], tmp_path / "averaged")

    assert output == tmp_path / "averaged"
    averaged = load_file(output / WEIGHTS_NAME)
    assert averaged.keys() == tensors_a().keys()
    # Values chosen so that every mean is exactly representable in its dtype.
    assert torch.equal(averaged["model.shared.weight"], torch.tensor([[2.0, 3.5], [-2.0, 0.375]]))
    assert torch.equal(averaged["model.layer_norm.weight"], torch.tensor([1.5, 3.0], dtype=torch.bfloat16))
    # A float16 sum would overflow to inf here; the average is taken in float64.
    assert torch.equal(averaged["model.big.weight"], torch.tensor([60000.0, -60000.0], dtype=torch.float16))
    assert torch.equal(averaged["model.steps"], torch.tensor([7, 8], dtype=torch.int64))
    for key, tensor in tensors_a().items():
        assert averaged[key].dtype == tensor.dtype, key
    with safe_open(output / WEIGHTS_NAME, framework="pt") as weights:
        assert weights.metadata() == {"format": "pt"}

    # The last checkpoint's config and code come along, its training state does not.
    assert json.loads((output / "config.json").read_text())["step"] == 2
    copied = {path.name for path in output.iterdir()}
    assert copied == {
        WEIGHTS_NAME,
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "modeling_vaswani.py",
    }
    # Nothing but the output folder is left beside it.
    assert sorted(path.name for path in tmp_path.iterdir()) == ["averaged", "checkpoint-1", "checkpoint-2"]


def test_mismatched_keys_name_the_key_and_checkpoint(tmp_path: Path) -> None:
    renamed = tensors_b()
    renamed["model.other.weight"] = renamed.pop("model.shared.weight")
    first = make_checkpoint(tmp_path / "checkpoint-1", tensors_a())
    second = make_checkpoint(tmp_path / "checkpoint-2", renamed)
    with pytest.raises(ValueError, match=r"model\.shared\.weight") as error:
        average_checkpoints([first, second], tmp_path / "averaged")
    assert "checkpoint-2" in str(error.value) and "model.other.weight" in str(error.value)
    assert not (tmp_path / "averaged").exists()


def test_mismatched_shapes_and_integer_tensors_are_errors(tmp_path: Path) -> None:
    first = make_checkpoint(tmp_path / "checkpoint-1", tensors_a())
    reshaped = tensors_b()
    reshaped["model.shared.weight"] = torch.zeros(4)
    second = make_checkpoint(tmp_path / "checkpoint-2", reshaped)
    with pytest.raises(ValueError, match=r"checkpoint-2.*'model.shared.weight'.*\(4,\)"):
        average_checkpoints([first, second], tmp_path / "averaged")

    changed = tensors_b()
    changed["model.steps"] = torch.tensor([7, 9])
    third = make_checkpoint(tmp_path / "checkpoint-3", changed)
    with pytest.raises(ValueError, match=r"checkpoint-3.*'model.steps'"):
        average_checkpoints([first, third], tmp_path / "averaged")


def test_failed_write_leaves_no_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = make_checkpoint(tmp_path / "checkpoint-1", tensors_a())
    second = make_checkpoint(tmp_path / "checkpoint-2", tensors_b())

    def crash(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(average_module.shutil, "copy2", crash)
    with pytest.raises(OSError, match="disk full"):
        average_checkpoints([first, second], tmp_path / "averaged")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checkpoint-1", "checkpoint-2"]


def test_existing_output_is_replaced_only_when_asked(tmp_path: Path) -> None:
    first = make_checkpoint(tmp_path / "checkpoint-1", tensors_a())
    second = make_checkpoint(tmp_path / "checkpoint-2", tensors_b())
    output = tmp_path / "averaged"
    output.mkdir()
    (output / "stale.txt").write_text("old")
    with pytest.raises(FileExistsError):
        average_checkpoints([first, second], output)
    average_checkpoints([first, second], output, overwrite=True)
    assert not (output / "stale.txt").exists()
    assert (output / WEIGHTS_NAME).is_file()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["averaged", "checkpoint-1", "checkpoint-2"]


def make_run_dir(run_dir: Path) -> None:
    for step in (2, 9, 10):
        make_checkpoint(run_dir / f"checkpoint-{step}", tensors_a(), step=step)
    (run_dir / "checkpoint-11").mkdir()  # being written: no weights yet
    (run_dir / "checkpoint-final").mkdir()
    (run_dir / "checkpoint-12").write_text("not a folder")


def test_last_checkpoints_sorts_by_step_number(tmp_path: Path) -> None:
    make_run_dir(tmp_path)
    assert last_checkpoints(tmp_path, 2) == [tmp_path / "checkpoint-9", tmp_path / "checkpoint-10"]
    assert last_checkpoints(tmp_path, 1) == [tmp_path / "checkpoint-10"]


def test_last_checkpoints_skips_incomplete_ones_as_resuming_does(tmp_path: Path, caplog) -> None:
    """The same rule as `--resume_from_checkpoint True`: the trainer state is written last, weights must read."""
    make_run_dir(tmp_path)
    truncated = make_checkpoint(tmp_path / "checkpoint-13", tensors_a(), step=13) / WEIGHTS_NAME
    truncated.write_bytes(truncated.read_bytes()[:40])
    unfinished = make_checkpoint(tmp_path / "checkpoint-14", tensors_a(), step=14) / "trainer_state.json"
    unfinished.unlink()
    with caplog.at_level(logging.WARNING):
        found = last_checkpoints(tmp_path, 2)
    assert found == [tmp_path / "checkpoint-9", tmp_path / "checkpoint-10"]
    assert f"{truncated} is truncated or corrupted" in caplog.text
    assert f"{unfinished} is missing" in caplog.text
    # The resume side agrees on which checkpoint is the last complete one.
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-10")


def test_last_checkpoints_with_too_few_or_none(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    make_run_dir(tmp_path)
    with caplog.at_level(logging.WARNING, logger="hf_vaswani_training.recipe.average_checkpoints"):
        found = last_checkpoints(tmp_path, 5)
    assert [path.name for path in found] == ["checkpoint-2", "checkpoint-9", "checkpoint-10"]
    assert "only 3" in caplog.text

    empty = tmp_path / "empty_run"
    empty.mkdir()
    with pytest.raises(ValueError, match="empty_run"):
        last_checkpoints(empty, 5)


def test_cli_averages_last_checkpoints(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    make_checkpoint(run_dir / "checkpoint-9", tensors_a(), step=9)
    make_checkpoint(run_dir / "checkpoint-10", tensors_b(), step=10)
    make_checkpoint(run_dir / "checkpoint-8", {k: v * 100 for k, v in tensors_a().items()}, step=8)
    output = tmp_path / "averaged"
    command = [sys.executable, "-m", "hf_vaswani_training.average_checkpoints", "--run-dir", str(run_dir)]
    command += ["--last", "2", "--output", str(output)]
    completed = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
    assert str(run_dir / "checkpoint-9") in completed.stdout
    assert str(run_dir / "checkpoint-10") in completed.stdout
    assert "checkpoint-8" not in completed.stdout
    averaged = load_file(output / WEIGHTS_NAME)
    assert torch.equal(averaged["model.shared.weight"], torch.tensor([[2.0, 3.5], [-2.0, 0.375]]))
    assert json.loads((output / "config.json").read_text())["step"] == 10
