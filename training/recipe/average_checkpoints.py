"""Checkpoint averaging, as in the paper (§6.1): the base models use "a single model obtained by averaging
the last 5 checkpoints, which were written at 10-minute intervals", the big models the last 20.

Works on the `checkpoint-STEP` folders that `Seq2SeqTrainer` writes (vaswani-train keeps them in the output
folder's `checkpoints/`; --run-dir finds them there or directly in the folder). Only `model.safetensors` is read
(never a pickle), and the result is a folder that `from_pretrained` loads like any of the inputs.

    vaswani-average --run-dir runs/base --last 5 --output runs/base-averaged
    vaswani-average --inputs runs/base/checkpoints/checkpoint-90000 runs/base/checkpoints/checkpoint-100000 \
        --output runs/base-averaged

(`python -m training.average_checkpoints` from a checkout is the same command; --verbose adds the libraries' INFO
logs, training/console.py.)
"""

from __future__ import annotations

import fnmatch
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch and safetensors load when there is work, after the arguments are checked
    import torch

from ..console import setup_logging
from ..usage import ArgumentParser, UsageError, positive_int
from .checkpoints import last_complete_checkpoints, publish, staging_dir_for

logger = logging.getLogger(__name__)

WEIGHTS_NAME = "model.safetensors"

# Files of the last checkpoint that are not copied: the Trainer's resume state describes one point of one
# run and means nothing for an average, and any other weight file would be a stale, un-averaged copy of the
# model lying next to the averaged one.
_NOT_COPIED_PATTERNS = (
    "optimizer.pt",
    "optimizer.bin",
    "scheduler.pt",
    "scaler.pt",
    "rng_state*.pth",
    "trainer_state.json",
    "training_args.bin",
    "*.safetensors",
    "*.safetensors.index.json",
    "pytorch_model*.bin",
)


def _is_copied(name: str) -> bool:
    return not any(fnmatch.fnmatchcase(name, pattern) for pattern in _NOT_COPIED_PATTERNS)


def _load_weights(checkpoint_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    weights_path = checkpoint_dir / WEIGHTS_NAME
    if not weights_path.is_file():
        raise ValueError(f"{checkpoint_dir} has no {WEIGHTS_NAME} (sharded or .bin checkpoints are not supported)")
    try:
        return load_file(weights_path, device="cpu")
    except SafetensorError as error:
        raise ValueError(f"{weights_path} is truncated or corrupted ({error})") from error


def _check_matches(
    reference: dict[str, torch.Tensor],
    reference_dir: Path,
    state_dict: dict[str, torch.Tensor],
    checkpoint_dir: Path,
) -> None:
    """Raise a ValueError naming the checkpoint and the key where `state_dict` differs in layout."""
    missing = sorted(reference.keys() - state_dict.keys())
    unexpected = sorted(state_dict.keys() - reference.keys())
    if missing or unexpected:
        raise ValueError(
            f"{checkpoint_dir / WEIGHTS_NAME} does not have the keys of {reference_dir / WEIGHTS_NAME}: "
            f"missing keys {missing}, unexpected keys {unexpected}"
        )
    for key, tensor in state_dict.items():
        if tensor.shape != reference[key].shape or tensor.dtype != reference[key].dtype:
            raise ValueError(
                f"{checkpoint_dir / WEIGHTS_NAME}: key {key!r} is {tensor.dtype} {tuple(tensor.shape)}, but "
                f"{tuple(reference[key].shape)} {reference[key].dtype} in {reference_dir / WEIGHTS_NAME}"
            )
        # Integer and bool buffers (step counters, masks) have no meaningful average.
        if not tensor.is_floating_point() and not tensor.equal(reference[key]):
            raise ValueError(
                f"{checkpoint_dir / WEIGHTS_NAME}: non-floating-point tensor {key!r} ({tensor.dtype}) "
                f"differs from {reference_dir / WEIGHTS_NAME}; it cannot be averaged"
            )


def average_checkpoints(
    checkpoint_dirs: Sequence[str | Path],
    output_dir: str | Path,
    overwrite: bool = False,
) -> Path:
    """Average the `model.safetensors` weights of `checkpoint_dirs` into a new model folder `output_dir`.

    Floating-point tensors are averaged in float64 and cast back to their dtype; other tensors must be equal
    in every checkpoint and are copied. The other files of the last checkpoint (config, generation config,
    tokenizer, remote code, README) are copied, the Trainer's resume state is not. The output is written to
    a temporary folder next to `output_dir` and renamed into place at the end, so `output_dir` is either
    complete or absent. An existing non-empty `output_dir` is replaced only with `overwrite=True`.
    """
    import torch
    from safetensors.torch import save_file

    checkpoint_dirs = [Path(checkpoint_dir) for checkpoint_dir in checkpoint_dirs]
    output_dir = Path(output_dir)
    if not checkpoint_dirs:
        raise ValueError("no checkpoints to average")
    resolved = [checkpoint_dir.resolve() for checkpoint_dir in checkpoint_dirs]
    if len(set(resolved)) != len(resolved):
        raise ValueError(f"a checkpoint is listed twice (it would get double weight): {checkpoint_dirs}")
    if output_dir.resolve() in resolved:
        raise ValueError(f"output_dir {output_dir} is one of the checkpoints being averaged")
    if output_dir.exists() and not output_dir.is_dir():
        raise FileExistsError(f"{output_dir} exists and is not a directory")
    if output_dir.exists() and any(output_dir.iterdir()) and not overwrite:
        raise FileExistsError(f"{output_dir} exists and is not empty; pass overwrite=True to replace it")

    # One checkpoint in memory at a time, plus the float64 running sums.
    reference_dir = checkpoint_dirs[0]
    reference: dict[str, torch.Tensor] = {}
    sums: dict[str, torch.Tensor] = {}
    for index, checkpoint_dir in enumerate(checkpoint_dirs):
        logger.info("Reading %s (%d/%d)", checkpoint_dir, index + 1, len(checkpoint_dirs))
        state_dict = _load_weights(checkpoint_dir)
        if index == 0:
            reference = state_dict
            # copy=True: a float64 tensor would otherwise be its own running sum and change under us.
            sums = {
                key: tensor.to(torch.float64, copy=True)
                for key, tensor in state_dict.items()
                if tensor.is_floating_point()
            }
            continue
        _check_matches(reference, reference_dir, state_dict, checkpoint_dir)
        for key, running_sum in sums.items():
            running_sum += state_dict[key].to(torch.float64)
        del state_dict

    averaged = {
        key: (sums[key] / len(checkpoint_dirs)).to(tensor.dtype) if key in sums else tensor
        for key, tensor in reference.items()
    }

    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging_dir = staging_dir_for(output_dir)
    shutil.rmtree(staging_dir, ignore_errors=True)  # left by an average that was killed
    staging_dir.mkdir()
    try:
        save_file(averaged, staging_dir / WEIGHTS_NAME, metadata={"format": "pt"})
        last_dir = checkpoint_dirs[-1]
        for path in sorted(last_dir.iterdir()):
            # Trainer checkpoints are flat; folders there are optimizer shards (DeepSpeed) and the like.
            if path.is_file() and _is_copied(path.name):
                shutil.copy2(path, staging_dir / path.name)
                logger.debug("Copied %s", path)
        publish(staging_dir, output_dir)
    except BaseException:
        shutil.rmtree(staging_dir, ignore_errors=True)
        raise
    logger.info("Wrote the average of %d checkpoints to %s", len(checkpoint_dirs), output_dir)
    return output_dir


def last_checkpoints(run_dir: str | Path, n: int) -> list[Path]:
    """The last `n` complete `checkpoint-STEP` folders of a Trainer output dir, oldest first.

    Sorted by the numeric step (`checkpoint-9` before `checkpoint-10`); a checkpoint is complete as
    training/recipe/checkpoints.py defines it, and incomplete ones are skipped with a warning. Fewer than `n` is a
    warning, none is a ValueError.
    """
    run_dir = Path(run_dir)
    if n < 1:
        raise ValueError(f"n={n} must be at least 1")
    if not run_dir.is_dir():
        raise ValueError(f"run_dir {run_dir} is not a directory")
    checkpoints = last_complete_checkpoints(run_dir, n)
    if not checkpoints:
        raise ValueError(f"no complete checkpoint-STEP folder in run_dir {run_dir}")
    if len(checkpoints) < n:
        logger.warning("Asked for the last %d checkpoints of %s, but there are only %d", n, run_dir, len(checkpoints))
    return checkpoints


def main(argv: Sequence[str] | None = None) -> None:
    """Average as the command line says. A user error raises UsageError; vaswani-average prints it as one line and
    exits with status 2."""
    parser = ArgumentParser(
        prog="vaswani-average",
        description="Average the weights of several checkpoints into one model folder (paper §6.1).",
    )
    parser.add_argument("--output", required=True, type=Path, help="folder to write the averaged model to")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--inputs", nargs="+", type=Path, metavar="CKPT", help="checkpoint folders to average")
    source.add_argument("--run-dir", type=Path, help="Trainer output dir whose last checkpoints are averaged")
    parser.add_argument(
        "--last", type=positive_int, metavar="N", help="with --run-dir: how many checkpoints (paper: 5 base, 20 big)"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing non-empty --output")
    parser.add_argument(
        "--verbose", action="store_true", help="the libraries' INFO logs too (default: their warnings only)"
    )
    args = parser.parse_args(argv)

    if args.run_dir is not None and args.last is None:
        parser.error("--run-dir needs --last N")
    if args.inputs is not None and args.last is not None:
        parser.error("--last only applies to --run-dir")

    setup_logging(args.verbose)  # training/console.py: the commands' one log format, the libraries quiet
    try:
        checkpoint_dirs = args.inputs if args.inputs else last_checkpoints(args.run_dir, args.last)
        output_dir = average_checkpoints(checkpoint_dirs, args.output, overwrite=args.overwrite)
    except UsageError:
        raise
    except (ValueError, FileExistsError) as error:
        # Bad inputs are the user's to fix: a one-line message, not a traceback.
        raise UsageError(str(error)) from None
    print(f"Averaged {len(checkpoint_dirs)} checkpoints:")
    for checkpoint_dir in checkpoint_dirs:
        print(f"  {checkpoint_dir}")
    print(f"into {output_dir}")
