"""The machine a benchmark runs on: its name, the dtype its matrix units run natively, its matrix-product peak
(measured in the run, and the datasheet's), and a step clock that adds no host-device synchronisation.

On a CPU, bf16 is native only with AVX512_BF16 or AMX-BF16 (and oneDNN allowed to use them): elsewhere torch's bf16
matrix product takes a generic path at under 1 GFLOP/s (measured on this project's machine with
`ONEDNN_MAX_CPU_ISA=AVX2`: 0.6 GFLOP/s against 265 with AMX and 42 in float32), so a benchmark on such a CPU
measures and computes in float32. `HF_VASWANI_BENCH_CPU_BF16=0` (or 1) overrides the detection, so that a test can
take the branch of a CPU without native bf16 on any machine.
"""

from __future__ import annotations

import os
import platform
import re
import time
from pathlib import Path

import torch

CPU_BF16_ENV = "HF_VASWANI_BENCH_CPU_BF16"
# Dense bf16 (fp16 where the chip has no bf16) tensor-core peaks from the vendors' datasheets, TFLOP/s, without
# sparsity. The first pattern that matches torch.cuda.get_device_name() wins.
DATASHEET_TFLOPS = (
    (r"H100.*PCIe", 756.0, "H100 PCIe, dense bf16"),
    (r"H100", 989.0, "H100 SXM, dense bf16"),
    (r"H200", 989.0, "H200, dense bf16"),
    (r"A100", 312.0, "A100, dense bf16"),
    (r"\bL4\b", 121.0, "L4, dense bf16"),
    (r"\bT4\b", 65.0, "T4, dense fp16 (no bf16)"),
    (r"V100", 125.0, "V100, dense fp16 (no bf16)"),
)
# oneDNN ISA caps below which its bf16 kernels are off (oneDNN's dnnl_cpu_isa names).
_ONEDNN_NO_BF16 = {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI"}


# ---- the machine ----------------------------------------------------------------------------------------------------


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (nothing to wait for on the CPU)."""
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_has_native_bf16() -> bool:
    """AVX512_BF16 or AMX-BF16 present and oneDNN allowed to use them; `HF_VASWANI_BENCH_CPU_BF16` overrides."""
    forced = os.environ.get(CPU_BF16_ENV, "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    if os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper() in _ONEDNN_NO_BF16:
        return False
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU: {cpu_name()} ({torch.get_num_threads()} threads, {torch.backends.cpu.get_cpu_capability()})"


def has_bf16(device: torch.device) -> bool:
    if device.type == "cpu":
        return cpu_has_native_bf16()
    return torch.cuda.is_bf16_supported(including_emulation=False)


def native_precision(device: torch.device) -> str:
    """The training precision a benchmark uses on `device`: bf16 where native, else fp16 on a GPU (T4, V100) and
    fp32 on a CPU."""
    if has_bf16(device):
        return "bf16"
    return "fp16" if device.type == "cuda" else "fp32"


def matmul_dtype(device: torch.device) -> torch.dtype:
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[native_precision(device)]


def datasheet_peak(name: str) -> tuple[float | None, str]:
    """(FLOP/s, what it is) of the device named `name`; None for a device not in the table (a CPU)."""
    for pattern, tflops, label in DATASHEET_TFLOPS:
        if re.search(pattern, name):
            return tflops * 1e12, f"{label} {tflops:g} TFLOP/s (datasheet)"
    return None, "no datasheet peak for this device"


def measured_matmul_peak(device: torch.device, dtype: torch.dtype, seconds: float = 1.5) -> float:
    """Achievable FLOP/s of a square `torch.mm` in `dtype`: the best of three timed loops, random operands (zeros
    run faster than real data on some GPUs). 8192² on a GPU; 1024² on a CPU (float32 there unless bf16 is native)."""
    n = 8192 if device.type == "cuda" else 1024
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    torch.mm(a, b)
    synchronize(device)
    best = 0.0
    for _ in range(3):
        calls, started = 0, time.perf_counter()
        while True:
            torch.mm(a, b)
            calls += 1
            if calls % 4 == 0 or device.type == "cpu":
                synchronize(device)
                elapsed = time.perf_counter() - started
                if elapsed >= seconds / 3:
                    break
        best = max(best, 2 * n**3 * calls / elapsed)
    return best


# ---- the step clock -------------------------------------------------------------------------------------------------


class StepClock:
    """Marks the end of each step on the device's own timeline (CUDA events: no synchronisation), and stops the run
    once its time budget is spent (host time). The first mark synchronises once, so that `first_step_s` (from
    `started` to the first step's end on the device) is the time to first step."""

    def __init__(self, device: torch.device, budget_s: float, max_steps: int):
        self.device, self.budget_s, self.max_steps = device, budget_s, max_steps
        self.marks: list = []
        self.started = time.perf_counter()
        self.first_step_s: float | None = None

    def start(self) -> None:
        self.started = time.perf_counter()

    def mark(self) -> bool:
        """Record a step's end; True when the run should stop."""
        if self.device.type == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())
        if len(self.marks) == 1:
            synchronize(self.device)
            self.first_step_s = time.perf_counter() - self.started
        return len(self.marks) >= self.max_steps or time.perf_counter() - self.started > self.budget_s

    def step_seconds(self) -> list[float]:
        """Seconds of each step after the first (the first is `first_step_s`)."""
        synchronize(self.device)
        if self.device.type == "cuda":
            return [self.marks[i - 1].elapsed_time(self.marks[i]) / 1e3 for i in range(1, len(self.marks))]
        return [self.marks[i] - self.marks[i - 1] for i in range(1, len(self.marks))]
