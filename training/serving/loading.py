"""Checks made just before a model loads for serving (vaswani-translate, vaswani-export, vaswani-push): the device
asked for exists, and the weights have the shapes their config gives them. They import torch and transformers, so they
live here and not in the torch-free ground floor (training/usage.py); each failure is one UsageError line.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..usage import UsageError


def check_device(device: str, option: str = "--device") -> None:
    """`device` names a device this machine has ("auto" always does): a GPU asked for where there is none is one line,
    not torch's AssertionError from deep inside `.to()`. Imports torch (call it just before the model loads)."""
    if device == "auto":
        return
    import torch

    try:
        parsed = torch.device(device)
    except RuntimeError:
        raise UsageError(f"{option} {device}: not a device; use auto, cpu, cuda or cuda:N") from None
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            built = "built without CUDA" if torch.version.cuda is None else "sees no GPU"
            raise UsageError(
                f"{option} {device}: this machine has no CUDA GPU (torch {built}); use --device cpu or auto"
            )
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise UsageError(
                f"{option} {device}: there are {torch.cuda.device_count()} GPUs (cuda:0 to "
                f"cuda:{torch.cuda.device_count() - 1}); choose one of them"
            )


def weights_shape_problem(model_dir: str) -> str | None:
    """Which tensor of `model_dir`'s model.safetensors does not have the shape its config.json gives it (weights of
    another model size beside this config), naming both shapes; None when all fit or there is nothing to compare.
    Reads the safetensors header and builds the config's model on the meta device (no memory, no weights)."""
    folder = Path(model_dir).expanduser()
    weights = folder / "model.safetensors"
    if not weights.is_file():
        return None
    try:
        with weights.open("rb") as handle:
            header = json.loads(handle.read(int.from_bytes(handle.read(8), "little")))
    except (OSError, ValueError):
        return None
    import torch
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    config = AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        model = AutoModelForSeq2SeqLM.from_config(config)
    expected = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    for name, info in header.items():
        if name in expected and isinstance(info, dict) and tuple(info.get("shape", ())) != expected[name]:
            return (
                f"{weights}: tensor {name} has shape {list(info['shape'])} but {folder / 'config.json'} makes it "
                f"{list(expected[name])}: the weights are of another model size than the config; put the config.json "
                "saved with these weights beside them"
            )
    return None
