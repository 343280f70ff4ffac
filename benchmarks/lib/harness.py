"""The harness of the Marian comparison: command line, timing, medians of interleaved repeats, report and JSON.

Every measure runs ours and Marian alternately (`interleaved`: the order flips each repeat, so neither always runs
on a warmer or quieter machine) and reports the median of wall-clock and of process CPU seconds.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from .machine import cpu_name, synchronize  # noqa: F401  (re-exported for the scripts)

logger = logging.getLogger("speed_vs_marian")

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT_MODULE = "benchmarks.speed_vs_marian"
DEFAULT_DATA_DIR = Path(os.environ.get("MULTI30K_DIR", REPO_ROOT.parent / "shared" / "data" / "multi30k"))
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
TARGETS = {  # ours / Marian, from the issue
    "training_step_tokens_per_s": 1.3,
    "pipeline_tokens_per_s": 1.5,
    "greedy_sentences_per_s": 1.5,
    "beam4_sentences_per_s": 1.5,
}


# ---- command line ---------------------------------------------------------------------------------------------------


def parse_args(argv=None, description: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="~1 minute smoke run: small sizes, training memory only")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default: cuda when available)")
    parser.add_argument(
        "--dtype", default=None, choices=["float32", "bfloat16"], help="default: bf16 on CUDA, fp32 on CPU"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats per measurement; the median is reported")
    parser.add_argument("--output", type=Path, default=None, help="JSON results (default: benchmarks/results/...)")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="Multi30K folder (env MULTI30K_DIR)")
    parser.add_argument("--cache-dir", type=Path, default=RESULTS_DIR / "cache", help="tokenizer, ids, warm weights")
    parser.add_argument("--model-dir", type=Path, default=None, help="a trained hf_vaswani folder to use as weights")
    parser.add_argument("--vocab-size", type=int, default=8000, help="joint BPE size")
    parser.add_argument("--preset", default="small", help="hf_vaswani preset for the architecture")
    parser.add_argument("--warm-steps", type=int, default=None, help="steps of warm-up training (default 400)")
    parser.add_argument("--max-tokens", type=int, default=None, help="TokenBatchSampler max_tokens (default 4096)")
    parser.add_argument("--train-batches", type=int, default=None, help="batches per timed training pass (default 3)")
    parser.add_argument(
        "--pipeline-tokens", type=int, default=None, help="real tokens per pipeline run (default 40000)"
    )
    parser.add_argument("--greedy-sentences", type=int, default=None, help="test sentences, greedy (default 512)")
    parser.add_argument("--beam-sentences", type=int, default=None, help="test sentences, beam 4 (default 192)")
    parser.add_argument("--gen-batch-size", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=64, help="the same generation limit for both models")
    parser.add_argument(
        "--skip", default="", help="comma-separated sections to skip: training,pipeline,greedy,beam,memory,mfu"
    )
    parser.add_argument("--profile", type=Path, default=None, help="write torch.profiler tables here and exit")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--probe", default=None, help=argparse.SUPPRESS)  # internal: one memory measurement
    args = parser.parse_args(argv)

    quick = args.quick
    defaults = {
        "warm_steps": (400, 400),
        "max_tokens": (4096, 1024),
        "train_batches": (3, 1),
        "pipeline_tokens": (40000, 8000),
        "greedy_sentences": (512, 64),
        "beam_sentences": (192, 32),
    }
    for name, (full, small) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, small if quick else full)
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    args.device = torch.device(args.device)
    if args.dtype is None:
        args.dtype = "bfloat16" if args.device.type == "cuda" else "float32"
    args.torch_dtype = getattr(torch, args.dtype)
    args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    if quick:
        args.skip |= {"memory-generation"}
    if args.output is None:
        args.output = RESULTS_DIR / f"speed_vs_marian-{args.device.type}{'-quick' if quick else ''}.json"
    return args


def configure_threads(args) -> None:
    if args.threads:
        torch.set_num_threads(args.threads)


# ---- the machine ----------------------------------------------------------------------------------------------------


def loadavg() -> list[float] | None:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return None


def warn_if_crowded() -> None:
    """More threads than the free cores make OpenMP threads wait on each other: the ratios then mostly measure that."""
    load = loadavg()
    if load and load[0] + torch.get_num_threads() > (os.cpu_count() or 1) + 0.5:
        logger.warning(
            "load average %.1f on %d cores: %d threads will compete with other processes (OpenMP threads wait on "
            "each other); --threads 1 gives steadier ratios on a shared machine",
            load[0],
            os.cpu_count(),
            torch.get_num_threads(),
        )


# ---- timing ---------------------------------------------------------------------------------------------------------


def median(values):
    return statistics.median(values) if values else None


class Stopwatch:
    """Wall-clock and process CPU seconds (all threads) of a block; CPU time is the steadier on a shared machine."""

    def __init__(self, device):
        self.device = device

    def __enter__(self):
        synchronize(self.device)
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        synchronize(self.device)
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


def summarize(name_seconds: dict, name_cpu: dict) -> dict:
    return {
        name: {
            "seconds": median(values),
            "seconds_all": values,
            "cpu_seconds": median(name_cpu[name]),
            "cpu_seconds_all": name_cpu[name],
        }
        for name, values in name_seconds.items()
    }


def interleaved(names: list[str], repeats: int, run: Callable[[str], Stopwatch], label: str) -> dict:
    """`run(name)` for every name, `repeats` times, the order reversed every other repeat; `run` returns the
    `Stopwatch` of the part it times. Median and all wall-clock and CPU seconds per name (`summarize`)."""
    seconds, cpu = {name: [] for name in names}, {name: [] for name in names}
    for repeat in range(repeats):
        for name in names if repeat % 2 == 0 else names[::-1]:
            watch = run(name)
            seconds[name].append(watch.wall)
            cpu[name].append(watch.cpu)
        logger.info("%s repeat %d: %s", label, repeat + 1, {k: round(v[-1], 2) for k, v in seconds.items()})
    return summarize(seconds, cpu)


# ---- report ---------------------------------------------------------------------------------------------------------


def ratio(a, b):
    return a / b if a and b else None


def build_table(results: dict) -> list[dict]:
    """Rows of (measure, ours, Marian, ours/Marian on wall-clock, the same ratio on CPU time, target)."""
    rows = []

    def add(label, section, key, cpu_key=None, ours="ours", target=None, unit=""):
        data = results.get(section)
        if not data or ours not in data:
            return
        a, b = data[ours][key], data["marian"][key]
        cpu_ratio = ratio(data[ours][cpu_key], data["marian"][cpu_key]) if cpu_key else None
        rows.append(
            {
                "measure": label,
                "ours": a,
                "marian": b,
                "ratio": ratio(a, b),
                "cpu_time_ratio": cpu_ratio,
                "target": target,
                "lower_is_better": False,
                "unit": unit,
            }
        )

    step, pipe = TARGETS["training_step_tokens_per_s"], TARGETS["pipeline_tokens_per_s"]
    add("train step, same batches: tgt tok/s", "training_step", "target_tokens_per_s", "cpu_tokens_per_s", target=step)
    add("train step, same batches: src+tgt tok/s", "training_step", "tokens_per_s", "cpu_tokens_per_s", target=step)
    add("pipeline (Trainer): tgt tok/s", "pipeline", "target_tokens_per_s", "cpu_tokens_per_s", target=pipe)
    add("pipeline (Trainer): src+tgt tok/s", "pipeline", "tokens_per_s", "cpu_tokens_per_s", target=pipe)
    for section, label in (("greedy", "greedy"), ("beam4", "beam 4")):
        target = TARGETS[f"{section}_sentences_per_s"]
        add(f"{label}, same batches: sent/s", section, "sentences_per_s", "cpu_sentences_per_s", target=target)
        add(f"{label}, same batches: gen tok/s", section, "generated_tokens_per_s", "cpu_sentences_per_s")
        add(
            f"{label}, translate() vs batches: sent/s",
            section,
            "sentences_per_s",
            "cpu_sentences_per_s",
            ours="ours_translate",
            target=target,
        )
    for task in ("training", "greedy", "beam4"):
        memory = results.get("memory", {}).get(task)
        if memory:
            a = memory["ours"]["peak_bytes_above_start"] / 2**20
            b = memory["marian"]["peak_bytes_above_start"] / 2**20
            rows.append(
                {
                    "measure": f"peak memory, {task} (MiB)",
                    "ours": a,
                    "marian": b,
                    "ratio": ratio(a, b),
                    "cpu_time_ratio": None,
                    "target": 1.0 if task == "training" else None,
                    "lower_is_better": True,
                    "unit": "MiB",
                }
            )
    peak = results.get("mfu", {}).get("matmul_peak_flop_per_s")
    if peak:
        for label, section in (
            ("MFU train step (%)", "training_step"),
            ("MFU greedy (%)", "greedy"),
            ("MFU beam 4 (%)", "beam4"),
        ):
            data = results.get(section)
            if data and "ours" in data:
                a, b = 100 * data["ours"]["flop_per_s"] / peak, 100 * data["marian"]["flop_per_s"] / peak
                rows.append(
                    {
                        "measure": label,
                        "ours": a,
                        "marian": b,
                        "ratio": ratio(a, b),
                        "cpu_time_ratio": None,
                        "target": None,
                        "lower_is_better": False,
                        "unit": "%",
                    }
                )
    return rows


def print_report(results: dict) -> None:
    meta = results["meta"]
    print()
    print(f"hf_vaswani vs MarianMTModel: {meta['device']} ({meta['cpu']}), {meta['dtype']}, {meta['threads']} threads")
    print(
        f"  load average {meta['loadavg_start']} -> {meta['loadavg_end']}; median of {meta['repeats']} interleaved repeats"
    )
    print(f"  weights: {meta['weights']}")
    parity_info = results["parity"]
    print(
        f"  parity: max |logit difference| = {parity_info['max_abs_logit_difference']:.2e} "
        f"(< {parity_info['tolerance']:g})"
    )
    for key in ("greedy", "beam4"):
        if key in results:
            g = results[key]
            print(
                f"  {key}: identical tokens for {g['identical_sentences']}/{g['sentences']} sentences on the same batches; "
                f"translate() gives Marian's text for {g['translate_identical_texts']}/{g['sentences']}"
            )
    print()
    header = f"{'measure':42s} {'ours':>10s} {'Marian':>10s} {'ratio':>7s} {'CPU-time':>8s}  {'target':<12s}"
    print(header)
    print("-" * len(header))
    for row in results["table"]:
        r, target = row["ratio"], row["target"]
        target_text = ""
        if target is not None and r is not None:
            met = r <= target if row["lower_is_better"] else r >= target
            target_text = f"{'<=' if row['lower_is_better'] else '>='}{target:g} {'met' if met else 'MISSED'}"
        cpu_ratio = f"{row['cpu_time_ratio']:8.2f}" if row["cpu_time_ratio"] else " " * 8
        ratio_text = f"{r:7.2f}" if r is not None else " " * 7
        print(
            f"{row['measure']:42s} {row['ours']:10.1f} {row['marian']:10.1f} {ratio_text} {cpu_ratio}  {target_text:<12s}"
        )
    print(
        "ratio = ours / Marian on wall-clock; CPU-time = the same ratio on process CPU seconds (steadier when shared)"
    )
    if "mfu" in results:
        print(f"matmul peak: {results['mfu']['matmul_peak_flop_per_s'] / 1e9:.1f} GFLOP/s ({results['mfu']['method']})")


def write_results(results: dict, path: Path, started: float) -> None:
    """Close the run's metadata, add the table and the ratios, print the report and write it all as JSON."""
    results["meta"]["loadavg_end"] = loadavg()
    results["meta"]["seconds"] = time.perf_counter() - started
    results["table"] = build_table(results)
    results["ratios"] = {row["measure"]: row["ratio"] for row in results["table"]}
    print_report(results)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, default=str))
    print(f"\nwritten to {path} ({results['meta']['seconds']:.0f} s)")
