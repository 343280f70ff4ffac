"""The prepared GPU command (issue 25): the paper's training and decoding on one GPU, cold and warm, in one run of
about 7.5 minutes, with the table printed last.

    python -m benchmarks.gpu --out gpu.json           # on a GPU: base and big, about 7.5 minutes
    python -m benchmarks.gpu --dry_run                # the planned rows and their time budgets; runs nothing
    python -m benchmarks.gpu --tiny --out tiny.json   # anywhere: the tiny preset on the CPU, under a minute
    bash benchmarks/gpu_device.sh                     # on a lent device machine (installs the carried wheels)

What runs, in order (benchmarks/README.md has the current table):

1. The matrix-product peak of the device in its native dtype (bf16; on a CPU float32 unless it has native bf16:
   benchmarks/lib/machine.py), and the data: a WMT14-shaped synthetic corpus (benchmarks/lib/corpus.py), a joint
   BPE of 37,000 tokens, the ids written once for every row's process (benchmarks/lib/wmt_data.py). The batches
   are the recipe's own (`VaswaniTrainer.get_train_dataloader` and its collator): their distinct shapes and padding
   over the first 1,000 micro-batches are reported for each setting.
2. Training, eager: for `base` and `big`, the recipe's `trainer`, `MarianMTModel` under the stock `Seq2SeqTrainer`
   and the `lean` loop (benchmarks/training_speed.py), in bf16, at the one-GPU paper settings: `max_tokens` and
   gradient accumulation from training/recipe/recipes/wmt14-en-de-<preset>-1gpu.yaml (25,600 × 1), else
   12,288 × 2; the table prints the real tokens a side per update; each row cold then warm.
3. Decoding weights: a base model trained for `--decode_train_seconds` by the lean loop on the same data, so that
   outputs end where a trained model ends them.
4. Decoding, eager: generate() with the paper's beam 4 and greedy, ours and Marian on those weights, cold and warm
   (benchmarks/decoding_speed.py).
5. Compiled, with a time budget of their own (`--compile_budget`): the trainer with `torch_compile`, and generate()
   with the static cache (which transformers compiles), reporting time to first step and graphs compiled.

Each row runs in its own process on a GPU (`--isolate`, the default there): nothing it measures cold was built by a
row before it, so the order of the rows changes nothing (compiler caches on disk are per row too). `--tiny` runs the
rows in this process (importing torch per row would take most of its minute; on a CPU there are no attention plans
to inherit). The results are written after every row (`--out` JSON and the same name with .md), so a run cut short
still leaves a table; a variant that needs CUDA is listed as "skipped: no CUDA". A benchmark, not a test: it asserts
nothing about time (tests/test_gpu_benchmark.py runs `--tiny` and `--dry_run` and checks the table's structure).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
RECIPES = REPO_ROOT / "training" / "recipe" / "recipes"
FALLBACK_SETTINGS = (12288, 2)  # max_tokens, accumulation where no one-GPU recipe exists
PROCESS_OVERHEAD_S = 10.0  # a row's own process: imports, CUDA context, data and model (H200, estimated)

logger = logging.getLogger("gpu_benchmark")


# ---- command line ---------------------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--tiny", action="store_true", help="the tiny preset on the CPU, a few steps: under a minute")
    parser.add_argument("--dry_run", action="store_true", help="print the planned rows and budgets, run nothing")
    parser.add_argument("--out", type=Path, default=None, help="JSON results (and the table as .md beside it)")
    parser.add_argument("--device", default=None, help="default: cuda when available (never with --tiny)")
    parser.add_argument("--presets", default=None, help="comma-separated (default base,big; tiny: tiny)")
    parser.add_argument("--data_dir", type=Path, default=None, help="train/test.{en,de} text pairs instead")
    parser.add_argument("--work_dir", type=Path, default=None, help="prepared data and weights (default: a temp dir)")
    parser.add_argument("--pairs", type=int, default=None, help="training pairs (default 40000; tiny 400)")
    parser.add_argument("--vocab_size", type=int, default=None, help="joint BPE size (default 37000; tiny 1000)")
    parser.add_argument("--max_tokens", type=int, default=None, help="micro-batch tokens (default: one-GPU recipe)")
    parser.add_argument("--accumulation", type=int, default=None, help="micro-batches an update (default: recipe)")
    parser.add_argument("--steps", type=int, default=None, help="updates a pass at most (default 16; tiny 3)")
    parser.add_argument("--train_budget", type=float, default=None, help="seconds a training row (default 14)")
    parser.add_argument("--decode_budget", type=float, default=None, help="seconds a decoding row (default 8)")
    parser.add_argument("--decode_train_seconds", type=float, default=None, help="decoding weights (default 30)")
    parser.add_argument("--compile_budget", type=float, default=None, help="seconds for compiled rows (default 125)")
    parser.add_argument(
        "--deadline", type=float, default=None, help="rows must end by then, as estimated (default 445 s; tiny 150)"
    )
    parser.add_argument("--sentences", type=int, default=None, help="decoded sentences (default 512; tiny 8)")
    parser.add_argument("--gen_batch_size", type=int, default=None, help="sentences a batch (default 128; tiny 4)")
    parser.add_argument("--max_new_tokens", type=int, default=None, help="length limit (default source + 50; tiny 8)")
    parser.add_argument("--skip", default="", help="comma-separated: trainer,marian,lean,decoding,compile or row names")
    parser.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                        help="each row in its own process (default: on a GPU yes, with --tiny no)")  # fmt: skip
    parser.add_argument("--batch_shapes", default="auto", choices=("auto", "bucketed", "exact"),
                        help="the recipe's --batch_shapes for every row (auto: bucketed on a GPU, exact on a CPU)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    tiny = args.tiny
    defaults = {
        "presets": ("base,big", "tiny"),
        "pairs": (40000, 400),
        "vocab_size": (37000, 1000),
        "steps": (16, 3),
        "train_budget": (14.0, 8.0),
        "decode_budget": (8.0, 5.0),
        "decode_train_seconds": (30.0, 1.0),
        "compile_budget": (125.0, 30.0),
        "deadline": (445.0, 150.0),
        "sentences": (512, 8),
        "gen_batch_size": (128, 4),
    }
    for name, (full, small) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, small if tiny else full)
    if args.max_new_tokens is None and tiny:
        args.max_new_tokens = 8
    if tiny and args.max_tokens is None:
        args.max_tokens, args.accumulation = 256, args.accumulation or 2
    args.presets = [p for p in args.presets.split(",") if p]
    args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the first update is the time to first step, the rest are timed)")
    return args


def settings_for(preset: str, args) -> tuple[int, int, str]:
    """(max_tokens, accumulation, where from) of a preset's training rows: the command line, else the one-GPU recipe
    (training/recipe/recipes/wmt14-en-de-<preset>-1gpu.yaml or .json), else `FALLBACK_SETTINGS`."""
    if args.max_tokens is not None:
        return args.max_tokens, args.accumulation or 1, "command line"
    for suffix in (".yaml", ".json"):
        recipe = RECIPES / f"wmt14-en-de-{preset}-1gpu{suffix}"
        if recipe.is_file():
            import yaml  # JSON is YAML too

            values = yaml.safe_load(recipe.read_text(encoding="utf-8"))
            return int(values["max_tokens"]), int(values.get("gradient_accumulation_steps", 1)), recipe.name
    return FALLBACK_SETTINGS[0], args.accumulation or FALLBACK_SETTINGS[1], "fallback (no one-GPU recipe file)"


# ---- the plan -------------------------------------------------------------------------------------------------------


def plan(args, precision: str, cuda: bool) -> list[dict]:
    """Every row of the table, in the order run, with its own time budget (seconds of measuring)."""
    rows = []
    for preset in args.presets:
        max_tokens, accumulation, source = settings_for(preset, args)
        for path in ("trainer", "marian", "lean"):
            rows.append(dict(kind="train", preset=preset, path=path, precision=precision, compile=False,
                             max_tokens=max_tokens, accumulation=accumulation, settings_from=source,
                             budget_s=args.train_budget))  # fmt: skip
    decode_preset = args.presets[0]
    max_tokens, _, source = settings_for(decode_preset, args)
    rows.append(dict(kind="decode_weights", preset=decode_preset, path="lean", precision=precision, compile=False,
                     max_tokens=max_tokens, accumulation=1, settings_from=source,
                     budget_s=args.decode_train_seconds))  # fmt: skip
    for search in ("beam4", "greedy"):
        for model in ("ours", "marian"):
            rows.append(dict(kind="decode", preset=decode_preset, model=model, search=search, compile=False,
                             budget_s=args.decode_budget))  # fmt: skip
    # Compiled rows share --compile_budget: the trainer 75 parts (8 updates a pass, 80% of its time cold: compiling
    # is the cold pass), each generate() 25.
    max_tokens, accumulation, source = settings_for(args.presets[0], args)
    compiled = [dict(kind="train", preset=args.presets[0], path="trainer", precision=precision, compile=True,
                     max_tokens=max_tokens, accumulation=accumulation, settings_from=source,
                     budget_s=args.compile_budget * 75 / 125, steps=min(args.steps, 8), cold_share=0.8)]  # fmt: skip
    compiled += [dict(kind="decode", preset=decode_preset, model=model, search="beam4", compile=True,
                      budget_s=args.compile_budget * 25 / 125) for model in ("ours", "marian")]  # fmt: skip
    rows += compiled
    for row in rows:
        if row["kind"] == "train":
            row["name"] = f"{row['preset']} {row['path']} {row['precision']}{' compiled' if row['compile'] else ''}"
        elif row["kind"] == "decode":
            row["name"] = f"{row['preset']} generate {row['model']} {row['search']}"
            row["name"] += " static cache+compile" if row["compile"] else " eager"
        else:
            row["name"] = f"{row['preset']} decoding weights ({row['budget_s']:.0f} s of the lean loop)"
        row["skip"] = skip_reason(row, args, cuda)
    return rows


def skip_reason(row, args, cuda: bool) -> str | None:
    tags = {row["name"], row.get("path"), row["compile"] and "compile", row["kind"] == "decode" and "decoding"}
    if args.skip & tags:
        return "skipped: --skip"
    if row["kind"] == "decode_weights" and {"decoding"} & args.skip:
        return "skipped: --skip"
    if row["compile"] and not cuda:
        return "skipped: no CUDA"
    return None


def estimate_s(row, args) -> float:
    return row["budget_s"] + (PROCESS_OVERHEAD_S if args.isolate else 1.0)


def print_plan(rows, args, precision: str, device: str) -> None:
    print(
        f"device {device}; precision {precision}; rows {'each in its own process' if args.isolate else 'in this process'}"
    )
    print(f"| row | budget s | estimated wall s | {'status' if any(r['skip'] for r in rows) else ''} |")
    print("|---|---:|---:|---|")
    total = 0.0
    for row in rows:
        estimate = 0.0 if row["skip"] else estimate_s(row, args)
        total += estimate
        extra = (
            f" (max_tokens {row['max_tokens']:,} × {row['accumulation']}: {row['settings_from']})"
            if "max_tokens" in row
            else ""
        )
        print(f"| {row['name']}{extra} | {row['budget_s']:.0f} | {estimate:.0f} | {row['skip'] or ''} |")
    print(
        f"rows: about {total:.0f} s; a row that would end after {args.deadline:.0f} s is skipped; data and peak come first "
        "(about 30 s on the GPU for 40,000 pairs and a 37k BPE)"
    )


# ---- running a row --------------------------------------------------------------------------------------------------


def row_spec(row, args, cuda: bool, vocab_size: int, peak: float) -> dict:
    spec = dict(cuda=cuda, seed=args.seed, batch_shapes=args.batch_shapes, vocab_size=vocab_size, peak=peak,
                steps=args.steps, sentences=args.sentences, batch_size=args.gen_batch_size,
                max_new_tokens=args.max_new_tokens)  # fmt: skip
    spec.update({key: row[key] for key in row if key not in ("skip", "result")})  # a row's own steps win
    if row["kind"] == "decode_weights":
        spec["seconds"] = row["budget_s"]
    return spec


def run_isolated(module: str, extra: list[str], spec: dict, timeout: float, work_dir: Path) -> dict:
    """`python -m module` for one row, with compiler caches of its own (nothing cached by another row is reused)."""
    out = work_dir / f"row-{time.monotonic_ns()}.json"
    caches = Path(tempfile.mkdtemp(prefix="row-caches-", dir=work_dir))
    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"),
        "TRITON_CACHE_DIR": str(caches / "triton"),
    }
    command = [sys.executable, "-m", module, *extra, "--spec", json.dumps(spec), "--out", str(out)]
    try:
        completed = subprocess.run(command, cwd=REPO_ROOT, env=env, timeout=timeout, capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        return {"status": f"killed after {timeout:.0f} s (its budget plus start-up)"}
    sys.stderr.write(completed.stderr[-4000:])
    if out.is_file():
        return json.loads(out.read_text())
    return {"status": f"failed: exit {completed.returncode}: {completed.stderr.strip().splitlines()[-1:]}"}


def run_row(row, spec, data, args, work_dir: Path) -> dict:
    if args.isolate:
        timeout = row["budget_s"] * 1.2 + 25  # its budget, the process start and the summary
        if row["kind"] == "decode":
            extra = ["--data", str(args.data_folder), "--model_dir", str(args.decode_dir)]
            return run_isolated("benchmarks.decoding_speed", extra, spec, timeout, work_dir)
        extra = ["--data", str(args.data_folder)]
        if row["kind"] == "decode_weights":
            extra += ["--train_for_decoding", str(args.decode_dir)]
        return run_isolated("benchmarks.training_speed", extra, spec, timeout, work_dir)
    from benchmarks import decoding_speed, training_speed

    if row["kind"] == "decode":
        return decoding_speed.measure_row(data, spec, args.decode_dir)
    if row["kind"] == "decode_weights":
        return training_speed.train_for_decoding(data, spec, args.decode_dir)
    return training_speed.measure_row(data, spec)


# ---- the run --------------------------------------------------------------------------------------------------------


def batch_shape_census(data, args, cuda: bool, steps: int = 1000) -> list[dict]:
    """Distinct shapes and padding of the first `steps` micro-batches of the recipe's sampler, bucketed and exact
    (training/data/batching.py's `sampler_statistics`, padded as the recipe pads them on this device)."""
    from hf_vaswani_training.data.batching import TokenBatchSampler, batch_shapes_for, sampler_statistics

    out = []
    for max_tokens in dict.fromkeys(settings_for(preset, args)[0] for preset in args.presets):
        for option in ("bucketed", "exact"):
            sampler = TokenBatchSampler([len(s) for s in data.source_ids], [len(t) for t in data.target_ids],
                                        max_tokens=max_tokens, seed=args.seed,
                                        shapes=batch_shapes_for(option, "cuda" if cuda else "cpu"))  # fmt: skip
            stats = sampler_statistics(sampler, steps, pad_to_multiple_of=8 if cuda else None)
            used = " (the rows' batches)" if option == batch_shapes_for_name(args.batch_shapes, cuda) else ""
            out.append({"label": f"max_tokens {max_tokens:,}, {option}{used}", "batches": stats["batches"],
                        "distinct_shapes": stats["distinct_shapes"], "padding_fraction": stats["padding"]})  # fmt: skip
    return out


def batch_shapes_for_name(option: str, cuda: bool) -> str:
    return ("bucketed" if cuda else "exact") if option == "auto" else option


def main(argv=None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    import torch
    import transformers

    from benchmarks.lib.gpu_table import markdown, ratios, write
    from benchmarks.lib.machine import datasheet_peak, device_name, matmul_dtype, measured_matmul_peak, native_precision
    from benchmarks.lib.wmt_data import load_data, prepare_data

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    started = time.perf_counter()
    device = torch.device(args.device or ("cpu" if args.tiny or not torch.cuda.is_available() else "cuda"))
    cuda = device.type == "cuda"
    if args.isolate is None:
        args.isolate = cuda and not args.tiny
    planned_only = args.dry_run and cuda and not torch.cuda.is_available()  # plan the GPU run on any machine
    precision = "bf16" if planned_only else native_precision(device)
    rows = plan(args, precision, cuda)
    name = "CUDA (planned: none here)" if planned_only else device_name(device)
    if args.dry_run:
        print_plan(rows, args, precision, name)
        return {"rows": rows}
    peak = measured_matmul_peak(device, matmul_dtype(device), seconds=0.3 if args.tiny else 1.5)
    if cuda:
        torch.cuda.empty_cache()  # the rows' processes get the memory the peak's operands held
    sheet, datasheet = datasheet_peak(name) if cuda else (None, "no datasheet peak for a CPU")
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="hf-vaswani-gpu-bench-"))
    args.data_folder = prepare_data(work_dir / f"data-{args.pairs}-{args.vocab_size}", args.pairs, args.vocab_size,
                                    args.sentences, args.seed, args.tiny, args.data_dir)  # fmt: skip
    args.decode_dir = work_dir / "decoding-weights"
    data = load_data(args.data_folder)
    vocab_size = max(args.vocab_size, len(data.tokenizer))  # the paper's 37,000 even if BPE stopped short
    report = {
        "meta": {
            "device": name,
            "date": time.strftime("%Y-%m-%d"),
            "commit": _commit(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "precision": precision,
            "matmul_peak_tflops": peak / 1e12,
            "matmul_dtype": str(matmul_dtype(device)).removeprefix("torch."),
            "datasheet": datasheet,
            "datasheet_peak_tflops": sheet / 1e12 if sheet else None,
            "vocab_size": vocab_size,
            "bpe_size": len(data.tokenizer),
            "pairs": len(data.source_ids),
            "corpus": data.corpus,
            "isolation": "each row in its own process" if args.isolate else "rows in one process",
            "batch_shapes": None,
            "batch_shapes_option": args.batch_shapes,
            "steps_per_pass": args.steps,
            "decode_weights": None,
        },
        "rows": rows,
        "targets": [],
    }
    report["meta"]["batch_shapes"] = batch_shape_census(data, args, cuda)
    deadline = started + args.deadline
    for index, row in enumerate(rows):
        reason = row["skip"]
        if reason is None and time.perf_counter() + estimate_s(row, args) > deadline:
            reason = "skipped: time budget spent"
        if reason is None and row["kind"] == "decode" and not (args.decode_dir / "config.json").is_file():
            reason = "skipped: no decoding weights"
        if reason is not None:
            row["result"] = {"status": reason}
            continue
        logger.info("[%d/%d] %s (%.0f s)", index + 1, len(rows), row["name"], row["budget_s"])
        spec = row_spec(row, args, cuda, vocab_size, peak)
        try:
            row["result"] = run_row(row, spec, data, args, work_dir)
        except Exception as error:  # a benchmark reports a failed row and goes on to the next
            logger.exception("%s failed", row["name"])
            row["result"] = {"status": f"failed: {type(error).__name__}: {str(error).splitlines()[0][:160]}"}
        if row["kind"] == "decode_weights" and row["result"].get("status") == "ok":
            report["meta"]["decode_weights"] = (f"{row['result']['updates']} updates of the lean loop in "
                                                f"{row['result']['seconds']:.0f} s on this device")  # fmt: skip
        if cuda and not args.isolate:
            torch.cuda.empty_cache()
        report["meta"]["seconds"] = time.perf_counter() - started
        report["targets"] = ratios(rows)
        write(report, args.out)
    report["meta"]["seconds"] = time.perf_counter() - started
    report["targets"] = ratios(rows)
    write(report, args.out)
    print()
    print(markdown(report), end="")
    return report


def _commit() -> str:
    try:
        completed = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                                   text=True, timeout=10)  # fmt: skip
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "hf_vaswani", "training", "benchmarks"],
                               cwd=REPO_ROOT, capture_output=True, text=True, timeout=10).stdout.strip()  # fmt: skip
        return completed.stdout.strip() + (" + uncommitted changes" if dirty else "") or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
