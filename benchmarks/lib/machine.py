"""The machine and the report of benchmarks/gpu.py: device names and peaks (measured and datasheet), the ratios
read against the issue's targets, and the markdown table the benchmark prints last."""

from __future__ import annotations

import json
import re
import time
import types
from pathlib import Path

import torch

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
TARGETS = {
    "mfu_big": 40.0,  # % of the measured matrix peak, big, bf16, the recipe's path
    "mfu_base": 30.0,
    "trainer_over_marian": 1.5,
    "trainer_over_lean": 0.9,
    "generate_over_marian": 1.5,
}


# ---- the machine ----------------------------------------------------------------------------------------------------


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    from benchmarks.lib.harness import cpu_name

    return f"CPU: {cpu_name()} ({torch.get_num_threads()} threads)"


def datasheet_peak(name: str) -> tuple[float | None, str]:
    """(FLOP/s, what it is) of the device named `name`; None for a device not in the table (a CPU)."""
    for pattern, tflops, label in DATASHEET_TFLOPS:
        if re.search(pattern, name):
            return tflops * 1e12, f"{label} {tflops:g} TFLOP/s (datasheet)"
    return None, "no datasheet peak for this device"


def measured_matmul_peak(device: torch.device, dtype: torch.dtype, tiny: bool) -> float:
    """Achievable FLOP/s of one large square `torch.mm` in `dtype` (benchmarks/lib/mfu.py's measure)."""
    from benchmarks.lib.mfu import matmul_peak

    return matmul_peak(types.SimpleNamespace(device=device, torch_dtype=dtype), seconds=0.3 if tiny else 1.5)


def has_bf16(device: torch.device) -> bool:
    return device.type == "cpu" or torch.cuda.is_bf16_supported(including_emulation=False)


class StepClock:
    """Marks the end of each step on the device's own timeline (CUDA events: no synchronisation), and stops the run
    once its time budget is spent (host time)."""

    def __init__(self, device: torch.device, budget_s: float, max_steps: int):
        self.device, self.budget_s, self.max_steps = device, budget_s, max_steps
        self.marks: list = []
        self.started = time.perf_counter()

    def mark(self) -> bool:
        """Record a step's end; True when the run should stop."""
        if self.device.type == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())
        return len(self.marks) >= self.max_steps or time.perf_counter() - self.started > self.budget_s

    def step_seconds(self, warmup: int) -> list[float]:
        """Seconds of each step after the first `warmup`."""
        synchronize(self.device)
        if self.device.type == "cuda":
            return [self.marks[i - 1].elapsed_time(self.marks[i]) / 1e3 for i in range(warmup, len(self.marks))]
        return [self.marks[i] - self.marks[i - 1] for i in range(warmup, len(self.marks))]


def ratios(results: list[dict]) -> list[dict]:
    """The issue's targets, read from the rows of this run."""
    by_name = {row["name"]: row.get("result", {}) for row in results}

    def value(name, key):
        result = by_name.get(name, {})
        return result.get(key) if result.get("status") == "ok" else None

    out = []

    def add(label, a, b, target, unit="x"):
        ratio = a / b if a is not None and b else None
        out.append({"measure": label, "value": ratio, "target": target, "unit": unit,
                    "met": None if ratio is None else ratio >= target})  # fmt: skip

    for preset in {row["preset"] for row in results}:
        trainer = value(f"{preset} trainer bf16", "target_tokens_per_s")
        add(f"{preset}: trainer / Marian stock, tgt tok/s", trainer, value(f"{preset} marian bf16", "target_tokens_per_s"),
            TARGETS["trainer_over_marian"])  # fmt: skip
        add(f"{preset}: trainer / lean loop, tgt tok/s", trainer, value(f"{preset} lean bf16", "target_tokens_per_s"),
            TARGETS["trainer_over_lean"])  # fmt: skip
        target = TARGETS.get(f"mfu_{preset}")
        if target is not None:
            mfu = value(f"{preset} trainer bf16", "mfu_measured_percent")
            out.append({"measure": f"{preset}: trainer bf16 MFU vs measured peak", "value": mfu, "target": target,
                        "unit": "%", "met": None if mfu is None else mfu >= target})  # fmt: skip
        for search in ("beam4", "greedy"):
            add(f"{preset}: generate {search} ours / Marian, sent/s",
                value(f"{preset} generate ours {search} eager", "sentences_per_s"),
                value(f"{preset} generate marian {search} eager", "sentences_per_s"), TARGETS["generate_over_marian"])  # fmt: skip
    return out


def fmt(value, spec=".1f") -> str:
    return "" if value is None else format(value, spec)


def markdown(report: dict) -> str:
    meta = report["meta"]
    lines = [
        f"GPU benchmark: {meta['device']}, {meta['date']}, torch {meta['torch']}, transformers {meta['transformers']}",
        f"matmul peak measured: {fmt(meta['matmul_peak_tflops'], '.1f')} TFLOP/s ({meta['matmul_dtype']}); "
        f"{meta['datasheet']}; batches of {meta['max_tokens']} tokens, vocabulary {meta['vocab_size']}",
        "",
        "| training run | tgt tok/s | all tok/s | step ms (p10-p90) | peak GiB | MFU meas. % | MFU sheet % | status |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in report["rows"]:
        if row["kind"] != "train":
            continue
        r = row.get("result", {"status": "not run yet"})
        step = f"{fmt(r.get('step_ms_median'))} ({fmt(r.get('step_ms_p10'))}-{fmt(r.get('step_ms_p90'))})"
        lines.append(
            f"| {row['name']} | {fmt(r.get('target_tokens_per_s'), ',.0f')} | {fmt(r.get('tokens_per_s'), ',.0f')} | "
            f"{step if r.get('status') == 'ok' else ''} | {fmt(r.get('peak_memory_gib'), '.2f')} | "
            f"{fmt(r.get('mfu_measured_percent'))} | {fmt(r.get('mfu_datasheet_percent'))} | {r['status']} |"
        )
    lines += ["", "| decoding run | sentences | sent/s | gen tok/s | status |", "|---|---:|---:|---:|---|"]
    for row in report["rows"]:
        if row["kind"] != "decode":
            continue
        r = row.get("result", {"status": "not run yet"})
        lines.append(
            f"| {row['name']} | {r.get('sentences', '')} | {fmt(r.get('sentences_per_s'))} | "
            f"{fmt(r.get('generated_tokens_per_s'), ',.0f')} | {r['status']} |"
        )
    lines += ["", "| target | value | wanted | |", "|---|---:|---:|---|"]
    for row in report["targets"]:
        met = "" if row["met"] is None else ("met" if row["met"] else "MISSED")
        lines.append(f"| {row['measure']} | {fmt(row['value'], '.2f')} | >= {row['target']:g}{row['unit']} | {met} |")
    lines.append(f"\ndecoding weights: {meta['decode_weights']}; {meta['seconds']:.0f} s in all")
    return "\n".join(lines) + "\n"


def write(report: dict, out: Path | None) -> None:
    if out is None:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    out.with_suffix(".md").write_text(markdown(report))
