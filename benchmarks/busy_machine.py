"""The main job on a busy machine: `vaswani-train toy` alone, beside one and beside two busy programs.

Each row runs the main job in a fresh child process (its own --output_dir in a temporary folder, its log in a file)
while 0, 1 or 2 other processes keep a core each busy (`while True: pass`), and reads from the run's log and
results.json:

- wall time of the whole command, and of training alone (results.json `train_minutes`);
- steps per second of training and CPU-seconds per step (the run's last progress line, recipe/console.py: all of
  its threads' CPU time, so a thread spinning at a barrier shows here);
- test BLEU (the recipe's final evaluation);
- the thread count the run chose (training/threads.py) and the load average when the row started.

Rows marked "old" force what the commands did before training/threads.py: `--threads` set to every CPU the machine
has and OpenMP's default waiting (the run is started through `training.recipe.train.main`, not the console script,
which sets OMP_WAIT_POLICY=PASSIVE). The row "busy1-all" asks for every CPU with `--threads` through the console script
(passive waits): what today's count would have given had it not left the busy core alone.

    python -m benchmarks.busy_machine                          # every row, the full recipe: about an hour on 2 cores
    python -m benchmarks.busy_machine --max_steps 40 --json /tmp/busy.json   # a quick look
    python -m benchmarks.busy_machine --rows quiet,busy1,busy1-old

It is a benchmark, not a test: it prints a markdown table (and writes JSON where --json says) and asserts nothing
about time. Compare rows from the same run: other work on the machine changes them all.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROWS = {  # name: (busy processes beside the run, how threads are chosen: "" today's count, "all" every CPU with
    # passive waits (--threads N), "old" every CPU with OpenMP's default waits)
    "quiet": (0, ""),
    "quiet-old": (0, "old"),
    "busy1": (1, ""),
    "busy1-all": (1, "all"),
    "busy1-old": (1, "old"),
    "busy2": (2, ""),
}
_MODES = {"old": " (all cores, OpenMP's default waits)", "all": " (--threads: all cores, passive waits)"}
_PROGRESS = re.compile(r"step ([\d,]+) of ([\d,]+) \(\d+%\): ([\d.]+) s and ([\d.]+) CPU-s a step")
_THREADS = re.compile(r"on (\d+) CPU threads")
_OLD = "import sys; from hf_vaswani_training.recipe.train import main; main(sys.argv[1:])"


def _busy(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def run_row(name: str, max_steps: int | None, work: Path, extra: list[str] = ()) -> dict:
    busy_count, mode = ROWS[name]
    output_dir = work / name
    args = ["toy", "--output_dir", str(output_dir), "--report_to", "none"]
    args += ["--max_steps", str(max_steps)] if max_steps else []
    args += list(extra)
    if mode == "old":
        command = [sys.executable, "-c", _OLD, *args, "--threads", str(os.cpu_count() or 1)]
    else:
        command = [str(Path(sys.executable).with_name("vaswani-train")), *args]
        command += ["--threads", str(os.cpu_count() or 1)] if mode == "all" else []
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    busy = _busy(busy_count)
    time.sleep(1.0)  # the busy ones are running when the run looks at the machine
    load = Path("/proc/loadavg").read_text().split()[0]
    log_path = work / f"{name}.log"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    try:
        with log_path.open("w") as log:
            completed = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, check=False)
        wall = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # before the busy ones are waited for
    finally:
        for process in busy:
            process.kill()
            process.wait()
    text = log_path.read_text()
    row = {"row": name, "busy": busy_count, "mode": mode, "load_at_start": float(load), "wall_s": round(wall, 1)}
    row["returncode"] = completed.returncode
    # the whole command's CPU time (data, training, evaluation); the busy processes are reaped after this was read
    row["command_cpu_s"] = round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1)
    threads = _THREADS.search(text)
    row["threads"] = int(threads.group(1)) if threads else None
    progress = _PROGRESS.findall(text)
    if progress:
        step, _, seconds, cpu = progress[-1]
        row.update(steps=int(step.replace(",", "")), s_per_step=float(seconds), cpu_s_per_step=float(cpu))
        row["steps_per_s"] = round(1 / float(seconds), 2) if float(seconds) else None
    results_path = output_dir / "results.json"
    if results_path.is_file():
        results = json.loads(results_path.read_text())["results"]
        row["train_min"] = results.get("train_minutes")
        test = results.get("test")
        row["test_bleu"] = round(test["bleu"], 2) if test else None
    if completed.returncode:
        row["log_tail"] = text[-2000:]
    return row


def table(rows: list[dict]) -> str:
    lines = [
        "| row | busy beside | threads | load at start | wall | training | steps/s | CPU-s a step | test BLEU |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        label = row["row"] + _MODES.get(row["mode"], "")
        train = f"{row['train_min']:.2f} min" if row.get("train_min") is not None else "-"
        lines.append(
            f"| {label} | {row['busy']} | {row.get('threads') or '-'} | {row['load_at_start']:.2f} "
            f"| {row['wall_s'] / 60:.2f} min | {train} | {row.get('steps_per_s', '-')} "
            f"| {row.get('cpu_s_per_step', '-')} | {row.get('test_bleu', '-')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.busy_machine", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--max_steps", type=int, default=None, help="Shorter runs for a quick look (default: the recipe's)."
    )
    parser.add_argument("--rows", default=",".join(ROWS), help=f"Comma-separated, of {', '.join(ROWS)}.")
    parser.add_argument("--json", type=Path, default=None, help="Write the rows here as JSON.")
    parser.add_argument(
        "--train_args",
        default="",
        help="More vaswani-train options for every row, e.g. '--preset FILE' to measure another preset.",
    )
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.rows.split(",") if name.strip()]
    unknown = [name for name in names if name not in ROWS]
    if unknown:
        parser.error(f"--rows: unknown {', '.join(unknown)}; choose from {', '.join(ROWS)}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="busy_machine-") as work:
        for name in names:
            row = run_row(name, args.max_steps, Path(work), shlex.split(args.train_args))
            print(json.dumps({k: v for k, v in row.items() if k != "log_tail"}), flush=True)
            if "log_tail" in row:
                print(row["log_tail"], file=sys.stderr)
            rows.append(row)
            if args.json is not None:
                args.json.write_text(json.dumps(rows, indent=2) + "\n")
    shown = (f" --max_steps {args.max_steps}" if args.max_steps else "") + (
        f" {args.train_args}" if args.train_args else ""
    )
    print(f"\n{os.cpu_count()} CPUs; vaswani-train toy{shown}")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
