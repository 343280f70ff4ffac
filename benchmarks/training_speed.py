"""How fast does each training path train, the first time it meets its batches (cold) and the second (warm)?

One row of the GPU benchmark (benchmarks/gpu.py starts one process per row, so that no row inherits another's
attention plans, cuBLAS heuristics, allocator pools or compiled code): a model of `--preset`, trained along `--path`
(trainer / marian / lean: benchmarks/lib/train_paths.py) over the recipe's first `--steps` updates of token batches
(`--max_tokens` a micro-batch, `--accumulation` micro-batches an update), twice:

- cold: the first pass in this process, over batch shapes it has never run;
- warm: a second pass over the batches the cold pass ran (all of them unless its share of the budget, 60%, ran out
  first; 80% for compiled rows): a new Trainer with the same seed draws the same batches; the lean loop keeps its
  optimizer.

Each pass reports the time to first step (from the call that starts training to the first update's end on the
device: data loader, optimizer, compilation included), the median and p10/p90 of the other updates' times, target
and all tokens per second, real tokens per update, and MFU: the model FLOPs of the timed updates
(benchmarks/lib/mfu.py's count, padding excluded) over the matrix-product peak measured by the caller (`--peak`).
Compiled rows (`--compile`) also report the graphs dynamo compiled and its graph breaks in each pass.

    python -m benchmarks.training_speed --data DIR --spec '{"preset": "base", "path": "trainer", ...}' --out row.json
    python -m benchmarks.training_speed --data DIR --train_for_decoding MODEL_DIR --spec '{...}'   # decoding weights

A benchmark, not a test: it prints measured numbers and asserts nothing about time.
"""

from __future__ import annotations

import logging
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.lib.machine import StepClock
from benchmarks.lib.row import finish_row, start_row
from benchmarks.lib.train_paths import (
    LeanLoop,
    dynamo_counts,
    marian_model,
    marian_pass,
    recipe_collator,
    stock_collator,
    trainer_pass,
    vaswani_trainer,
)
from benchmarks.lib.wmt_data import (
    batch_statistics,
    load_data,
    make_dataset,
    micro_batches,
    recipe_batching,
    vaswani_model,
)

logger = logging.getLogger("gpu_benchmark")

PASSES = ("cold", "warm")
COLD_SHARE = 0.6  # of a row's budget (compiled rows: 0.8, compiling is the cold pass); the warm pass gets the rest


def summarize(clock: StepClock, data, micro, accumulation: int, collate, config, peak: float | None) -> dict:
    """One pass's numbers from its clock and the micro-batches it ran."""
    updates = len(clock.marks)
    result = {"updates": updates, "first_step_s": clock.first_step_s}
    if updates < 2:
        result["status"] = f"out of budget: {updates} update(s), none timed after the first"
        return result
    seconds = clock.step_seconds()
    total = sum(seconds)
    timed = batch_statistics(data, micro[accumulation : updates * accumulation], collate, config)
    ran = batch_statistics(data, micro[: updates * accumulation], collate)
    quantiles = statistics.quantiles(seconds, n=10, method="inclusive") if len(seconds) > 1 else [seconds[0]] * 9
    result.update(
        status="ok",
        timed_updates=len(seconds),
        seconds=total,
        target_tokens_per_s=timed["target_tokens"] / total,
        tokens_per_s=(timed["source_tokens"] + timed["target_tokens"]) / total,
        step_ms_median=1e3 * statistics.median(seconds),
        step_ms_p10=1e3 * quantiles[0],
        step_ms_p90=1e3 * quantiles[-1],
        source_tokens_per_update=timed["source_tokens"] / len(seconds),
        target_tokens_per_update=timed["target_tokens"] / len(seconds),
        flop_per_s=timed["flops"] / total,
        padding_fraction=ran["padding_fraction"],
        distinct_shapes=ran["distinct_shapes"],
        micro_batches=ran["batches"],
    )
    if peak:
        result["mfu_percent"] = 100 * result["flop_per_s"] / peak
    return result


def measure_row(data, spec: dict) -> dict:
    """Cold and warm passes of one training row (`spec`: preset, path, precision, compile, steps, accumulation,
    max_tokens, budget_s, seed, cuda, peak, vocab_size)."""
    device = torch.device("cuda" if spec["cuda"] else "cpu")
    model = vaswani_model(spec["preset"], data.tokenizer, spec["vocab_size"], spec["seed"])
    config = model.config
    dataset = make_dataset(data)
    with tempfile.TemporaryDirectory() as output_dir:  # the recipe's batches and collator, from its own trainer
        sampler, collate = recipe_batching(vaswani_trainer(model, data, dataset, spec, None, output_dir))
    micro = micro_batches(sampler, spec["steps"] * spec["accumulation"])
    path = spec["path"]
    if path == "marian":
        model = marian_model(config)
        collate = stock_collator(data.tokenizer, model, spec["cuda"])
    elif path == "lean":
        lean = LeanLoop(model, spec, device, recipe_collator(data.tokenizer, model, spec["cuda"]))
    result = {"status": "ok", "passes": {}}
    started = time.perf_counter()
    clock: StepClock | None = None
    for name in PASSES:
        if clock is not None:
            # The same batches again: those the cold pass ran (all `steps` unless its budget ran out first).
            ran = len(clock.marks)
            if ran < 2:
                result["passes"]["warm"] = {"status": f"not run: the cold pass ran {ran} update(s) in its budget"}
                break
            spec = {**spec, "steps": ran}
            micro = micro[: ran * spec["accumulation"]]
        left = spec["budget_s"] - (time.perf_counter() - started)
        budget = spec["budget_s"] * spec.get("cold_share", COLD_SHARE) if name == "cold" else max(left, 1.0)
        clock = StepClock(device, budget, spec["steps"])
        counts = dynamo_counts()
        if spec["cuda"]:
            torch.cuda.reset_peak_memory_stats(device)
        if path == "trainer":
            settings = trainer_pass(model, data, dataset, spec, clock, micro)
        elif path == "marian":
            settings = marian_pass(model, data, micro, spec, clock)
        else:
            settings = lean.run(data, micro, clock)
        measured = summarize(clock, data, micro, spec["accumulation"], collate, config, spec.get("peak"))
        if spec["cuda"]:
            measured["peak_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        if spec["compile"]:
            after = dynamo_counts()
            measured["graphs_compiled"] = after["unique_graphs"] - counts["unique_graphs"]
            measured["graph_breaks"] = after["graph_breaks"] - counts["graph_breaks"]
        result["passes"][name] = measured
        result["settings"] = settings
        logger.info("%s %s: %s", spec.get("name", path), name, _one_line(measured))
    return result


def train_for_decoding(data, spec: dict, model_dir: Path) -> dict:
    """Weights whose outputs have real lengths: `spec["seconds"]` of the lean loop (bf16 where native; warm-up 200
    updates to the peak of a 200-update schedule's rate, not the paper's 4,000: the run is a minute), saved."""
    device = torch.device("cuda" if spec["cuda"] else "cpu")
    model = vaswani_model(spec["preset"], data.tokenizer, spec["vocab_size"], spec["seed"])
    dataset = make_dataset(data)
    with tempfile.TemporaryDirectory() as output_dir:
        sampler, _ = recipe_batching(vaswani_trainer(model, data, dataset, spec, None, output_dir))
    micro = micro_batches(sampler, int(spec["seconds"] * 50) + 10)  # more than 50 updates a second: none seen
    lean = LeanLoop(model, spec, device, recipe_collator(data.tokenizer, model, spec["cuda"]), warmup=200)
    clock = StepClock(device, spec["seconds"], len(micro))
    lean.run(data, micro, clock)
    model = model.float().cpu()
    import hf_vaswani

    hf_vaswani.set_paper_decoding(model.generation_config)
    model.save_pretrained(model_dir)
    data.tokenizer.save_pretrained(model_dir)
    return {"status": "ok", "updates": len(clock.marks), "seconds": time.perf_counter() - clock.started}


def _one_line(measured: dict) -> str:
    if measured.get("status") != "ok":
        return measured.get("status", "")
    return (f"first step {measured['first_step_s']:.2f} s, median {measured['step_ms_median']:.1f} ms, "
            f"{measured['target_tokens_per_s']:,.0f} tgt tok/s, {measured['distinct_shapes']} shapes")  # fmt: skip


def main(argv=None) -> int:
    weights = ("--train_for_decoding", dict(type=Path, default=None, help="train, save weights here, exit"))
    args, spec = start_row(__doc__, argv, ["--data", "--spec", "--out", weights])
    data = load_data(args.data)
    if args.train_for_decoding is not None:
        return finish_row(spec, args.out, lambda: train_for_decoding(data, spec, args.train_for_decoding))
    return finish_row(spec, args.out, lambda: measure_row(data, spec))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    raise SystemExit(main())
