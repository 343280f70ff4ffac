"""Peak memory of each model, in a fresh subprocess per measurement (CPU: the peak resident set above the resident
set before the work, via /proc/self/status VmHWM; CUDA: torch.cuda.max_memory_allocated).
"""

from __future__ import annotations

import gc
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast

from hf_vaswani import VaswaniForConditionalGeneration

from .decoding import generation_config
from .harness import REPO_ROOT, SCRIPT_MODULE, configure_threads, parse_args
from .model_pairs import marian_from_ours
from .training_step import training_step

logger = logging.getLogger("speed_vs_marian")


def _rss_kib() -> tuple[int | None, int | None]:
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None, None
    values = {k: int(m.group(1)) for k in ("VmRSS", "VmHWM") if (m := re.search(rf"{k}:\s+(\d+)", status))}
    return values.get("VmRSS"), values.get("VmHWM")


def _release_free_heap() -> None:
    """Give the allocator's free pages back to the OS (glibc), so that the memory freed while building the model
    (Marian is built from our weights, which are then dropped) cannot absorb the measured work unseen."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
        return True
    except OSError:
        return False


def run_probe(spec: dict) -> dict:
    """Inside the subprocess: build one model, then measure the peak of one task above the state before it."""
    args = parse_args(spec["argv"])
    configure_threads(args)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(spec["tokenizer_dir"])
    inputs = torch.load(spec["inputs_file"], weights_only=True)
    # Both models are built in both probes and the other one dropped, so that both start from the same state.
    ours = VaswaniForConditionalGeneration.from_pretrained(spec["model_dir"], attn_implementation="sdpa")
    marian = marian_from_ours(ours)
    model = ours if spec["model"] == "ours" else marian
    del ours, marian
    model.to(args.device)
    task = spec["task"]
    if task == "training":
        batch = {k: v.to(args.device) for k, v in inputs["training_batch"].items()}
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-5, betas=(0.9, 0.98), eps=1e-9)
        model.train()
    else:
        batch = {k: v.to(args.device) for k, v in inputs["generation_batch"].items()}
        model.to(args.torch_dtype)  # as in the timed generation
        model.eval()
        model.generation_config = generation_config(1 if task == "greedy" else 4, args, model.config)
    del tokenizer
    gc.collect()
    if args.device.type == "cuda":
        torch.cuda.synchronize(args.device)
        torch.cuda.reset_peak_memory_stats(args.device)
        before = torch.cuda.memory_allocated(args.device)
    else:
        _release_free_heap()
        reset = _reset_peak_rss()
        before, _ = _rss_kib()
        before *= 1024
    for _ in range(2):  # two steps: the second runs with the optimizer state the first created
        if task == "training":
            training_step(model, batch, optimizer, args, spec["model"] == "ours")
        else:
            with torch.no_grad():
                model.generate(**batch)
    if args.device.type == "cuda":
        torch.cuda.synchronize(args.device)
        peak = torch.cuda.max_memory_allocated(args.device)
        how = "torch.cuda.max_memory_allocated"
    else:
        _, hwm = _rss_kib()
        if reset:
            peak, how = hwm * 1024, "VmHWM after clear_refs"
        else:
            import resource

            peak, how = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "ru_maxrss"
    return {"peak_bytes_above_start": peak - before, "start_bytes": before, "method": how}


def bench_memory(args, model_dir, inputs_file, tasks) -> dict:
    results = {}
    for task in tasks:
        results[task] = {}
        for name in ("ours", "marian"):
            spec = {
                "argv": sys.argv[1:],
                "tokenizer_dir": str(args.cache_dir / f"tokenizer-bpe{args.vocab_size}"),
                "inputs_file": str(inputs_file),
                "model_dir": str(model_dir),
                "model": name,
                "task": task,
            }
            completed = subprocess.run(
                [sys.executable, "-m", SCRIPT_MODULE, "--probe", json.dumps(spec)],
                cwd=REPO_ROOT,
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONWARNINGS": "ignore"},
            )
            line = [ln for ln in completed.stdout.splitlines() if ln.startswith("PROBE ")]
            if completed.returncode != 0 or not line:
                raise RuntimeError(f"memory probe {name}/{task} failed:\n{completed.stderr[-3000:]}")
            results[task][name] = json.loads(line[-1][len("PROBE ") :])
            logger.info("memory %s %s: %.1f MiB", task, name, results[task][name]["peak_bytes_above_start"] / 2**20)
    return results
