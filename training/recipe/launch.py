"""How vaswani-train is started on several processes, GPUs or machines: through `accelerate launch --multi_gpu`
(torchrun underneath; NCCL on GPUs, gloo on CPUs), never a launcher of our own. docs/training.md,
"Several processes, GPUs and machines", has the commands and a SLURM example; tests/recipe/test_multi_machine.py runs
two machines on localhost.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..usage import UsageError


def check_launch(parent_cmdline: list[str] | None = None) -> None:
    """Refuse an `accelerate launch` that asked for several processes or machines but started this one alone.

    Without `--multi_gpu` (on a machine with fewer than 2 GPUs, or with `--cpu`), Accelerate goes to its simple
    launcher, which runs the script once per machine as a world of one (several CPU processes need mpirun and a
    hostfile): `--num_processes N` starts ONE process and says nothing, and `--num_machines M` starts one per machine,
    M runs that share no gradients and write the same output folder. The requested counts reach the script neither
    as WORLD_SIZE nor in any ACCELERATE_* variable, so they are read from the launcher's command line, the parent
    process (Linux /proc). The form that works, on CPUs too, is `--multi_gpu`: torchrun starts the processes, across
    machines with --num_machines/--machine_rank/--main_process_ip, on the gloo backend where there is no GPU.
    """
    # Only the simple launcher sets ACCELERATE_USE_CPU (True or False); torchrun sets WORLD_SIZE, mpirun its own.
    world_size_variables = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
    if "ACCELERATE_USE_CPU" not in os.environ or any(name in os.environ for name in world_size_variables):
        return
    if parent_cmdline is None:
        try:
            raw = Path(f"/proc/{os.getppid()}/cmdline").read_bytes()
        except OSError:
            return  # not Linux: nothing to read, nothing to check
        parent_cmdline = [part.decode(errors="replace") for part in raw.split(b"\0") if part]

    def requested(option: str) -> int:
        value = None
        for index, part in enumerate(parent_cmdline):
            for flag in (f"--{option}", f"--{option.replace('_', '-')}"):
                if part == flag and index + 1 < len(parent_cmdline):
                    value = parent_cmdline[index + 1]
                elif part.startswith(flag + "="):
                    value = part.split("=", 1)[1]
        return int(value) if value is not None and value.isdigit() else 1

    launcher = "accelerate launch --cpu" if "--cpu" in parent_cmdline else "accelerate launch"
    processes, machines = requested("num_processes"), requested("num_machines")
    if machines > 1:
        raise UsageError(
            f"{launcher} --num_machines {machines} starts one separate process on each machine (a world of one: they "
            "share no gradients and write the same output folder); use `accelerate launch --multi_gpu --num_machines "
            f"{machines} --machine_rank R --main_process_ip HOST0 --main_process_port PORT --num_processes "
            f"{max(processes, machines)} ...` on machine R instead, which trains with DDP across them (gloo on CPUs)"
        )
    if processes > 1:
        raise UsageError(
            f"{launcher} --num_processes {processes} starts only 1 process (without --multi_gpu Accelerate runs the "
            f"script once here); use `accelerate launch --multi_gpu --num_processes {processes} ...` instead, which "
            "runs that many CPU processes (gloo) on a machine without GPUs, or drop --num_processes"
        )
