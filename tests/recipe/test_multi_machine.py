"""Two "machines" on localhost train the toy recipe through `accelerate launch --num_machines 2` (DDP over gloo).

What a 2 x 8 GPU run does over NCCL, on one CPU host: two launchers, each with its own --machine_rank, meet at
--main_process_ip/--main_process_port and start one process each. With VASWANI_BATCH_LOG set, every rank writes what
it trained on and a fingerprint of its final weights (VaswaniTrainer), so the test sees rank 1 too, not only the files
that the main process writes.
"""

import contextlib
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from safetensors.torch import load_file

from hf_vaswani_training.recipe.checkpoints import checkpoints_dir
from tests.conftest import REPO_ROOT

# The toy recipe shortened (as in .ci/wheel_smoke.sh): its toy preset and learning rate, 2,000 training pairs, which
# make more than 6 batches per rank, so the 6 steps below stay within one epoch and no sentence may be seen twice.
SHORT_TOY = [
    "toy",
    "--toy_num_train", "2000",
    "--toy_num_validation", "4",
    "--toy_num_test", "4",
    "--max_steps", "6",
    "--save_steps", "3",
    "--average_last_n", "0",
    "--max_length_offset", "5",
    "--logging_steps", "1",
    "--report_to", "none",
    "--dataloader_num_workers", "0",
]  # fmt: skip
LAUNCH_TIMEOUT_S = 240  # for one two-machine launch; it takes well under a minute


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _kill_tree(process: subprocess.Popen) -> None:
    """The launcher and what it started: torchrun puts its workers in sessions of their own, out of its group."""
    with contextlib.suppress(psutil.NoSuchProcess):
        for child in psutil.Process(process.pid).children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
    process.kill()
    process.wait()


def launch_two_machines(arguments: list[str], log_dir: Path) -> None:
    """`accelerate launch --multi_gpu --num_machines 2 --machine_rank 0|1 ...` with one process per machine; both
    must succeed. A launcher that fails or runs past the timeout has both machines' processes killed."""
    log_dir.mkdir()
    port = _free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "MASTER_", "ACCELERATE_", "TORCHELASTIC"))
    }
    env.update(VASWANI_BATCH_LOG=str(log_dir), TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    machines, outputs = [], []
    for machine_rank in (0, 1):
        command = [
            sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu",
            "--num_machines", "2", "--machine_rank", str(machine_rank),
            "--main_process_ip", "127.0.0.1", "--main_process_port", str(port),
            "--num_processes", "2", "--mixed_precision", "no", "--dynamo_backend", "no",
            "-m", "hf_vaswani_training.train", *arguments,
        ]  # fmt: skip
        output = open(log_dir / f"machine-{machine_rank}.log", "w")  # noqa: SIM115 (closed below)
        outputs.append(output)
        machines.append(
            subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, text=True)
        )
    deadline = time.monotonic() + LAUNCH_TIMEOUT_S
    try:
        # One machine failing leaves the other waiting for it at the next collective: stop at the first failure.
        while any(machine.poll() is None for machine in machines):
            if any(machine.returncode not in (None, 0) for machine in machines) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        for machine in machines:
            if machine.poll() is None:
                _kill_tree(machine)
        for output in outputs:
            output.close()
    # Every failed machine's log: the first to fail may be either, and the other then fails on the lost connection.
    failed = [
        f"machine {rank} exited with {machine.returncode}:\n" + (log_dir / f"machine-{rank}.log").read_text()[-3000:]
        for rank, machine in enumerate(machines)
        if machine.returncode != 0
    ]
    assert not failed, "\n".join(failed)


def read_batch_log(log_dir: Path, rank: int) -> tuple[dict[int, list[str]], dict]:
    """(step -> the fingerprints of the sentences rank trained on at that step, its final record)."""
    steps, finals = {}, []
    for line in (log_dir / f"batches-rank{rank}.jsonl").read_text().splitlines():
        record = json.loads(line)
        assert record["rank"] == rank and record["world_size"] == 2
        if "weights" in record:
            finals.append(record)
        else:
            steps.setdefault(record["step"], []).extend(record["sources"])
    assert len(finals) == 1, f"rank {rank} wrote {len(finals)} final records"
    return steps, finals[0]


def tensor_fingerprint(tensor: torch.Tensor) -> str:
    """As the trainer writes it: a hash of the tensor's bytes."""
    return hashlib.sha1(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


def assert_ranks_agree_with_checkpoint(final_records: list[dict], checkpoint: Path, step: int) -> None:
    rank0, rank1 = final_records
    assert rank0["step"] == rank1["step"] == step
    assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == step
    # Bit for bit: DDP gives both ranks the same averaged gradients, and each applies the same Adam step to them.
    assert rank0["weights"] == rank1["weights"]
    saved = load_file(checkpoint / "model.safetensors")
    assert set(saved) <= set(rank0["weights"])
    assert {key: tensor_fingerprint(value) for key, value in saved.items()} == {
        key: rank0["weights"][key] for key in saved
    }


@pytest.mark.slow
def test_two_machines_shard_the_data_agree_on_the_weights_and_resume(tmp_path):
    output_dir = tmp_path / "run"
    checkpoints = checkpoints_dir(output_dir)
    arguments = [*SHORT_TOY, "--output_dir", str(output_dir)]
    launch_two_machines(arguments, tmp_path / "first")
    first = [read_batch_log(tmp_path / "first", rank) for rank in (0, 1)]
    for steps, _ in first:
        assert sorted(steps) == [1, 2, 3, 4, 5, 6]
        sources = [source for step in steps.values() for source in step]
        assert len(sources) == len(set(sources)) > 6  # nothing twice within an epoch (the corpus has no duplicates)
    seen = [{source for step in steps.values() for source in step} for steps, _ in first]
    assert not seen[0] & seen[1], "the two ranks trained on the same sentences"
    assert_ranks_agree_with_checkpoint([final for _, final in first], checkpoints / "checkpoint-6", step=6)
    straight = load_file(checkpoints / "checkpoint-6" / "model.safetensors")

    # Interrupted after step 3: the main process wrote checkpoint-3; both ranks resume from it on the shared disk.
    shutil.rmtree(checkpoints / "checkpoint-6")
    launch_two_machines([*arguments, "--resume_from_checkpoint", "True"], tmp_path / "resumed")
    resumed = [read_batch_log(tmp_path / "resumed", rank) for rank in (0, 1)]
    for rank, (steps, _) in enumerate(resumed):
        assert sorted(steps) == [4, 5, 6]
        # Each rank continues with its own next batches: the sampler's position and shard were restored.
        assert steps == {step: first[rank][0][step] for step in (4, 5, 6)}
    assert_ranks_agree_with_checkpoint([final for _, final in resumed], checkpoints / "checkpoint-6", step=6)
    # Optimizer state and schedule came back too: the resumed run ends where the straight one did. Not bit for bit
    # (CPU matmul blocking follows memory alignment, ~1e-7), except for the key biases: their true gradient is zero
    # (q.b_k is added to every score of a softmax row), and Adam scales the rounding noise they get to full steps.
    after_resume = load_file(checkpoints / "checkpoint-6" / "model.safetensors")
    for key in straight:
        if not key.endswith("k_proj.bias"):
            torch.testing.assert_close(after_resume[key], straight[key], atol=1e-5, rtol=1e-4, msg=key)
