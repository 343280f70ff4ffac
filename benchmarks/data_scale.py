"""The training data path at WMT 2014 scale: wall time, CPU time and peak memory from text files to batches.

It writes a deterministic synthetic corpus shaped like WMT 2014 en-de (benchmarks/lib/corpus.py) (two "languages", sentence lengths with
a mean of about 22 words and a tail to 230, Zipf-distributed words drawn from several hundred thousand types
built from syllables so that BPE has something to merge) under /tmp, then runs the project's data path on it
in a child process:

    read the text pair -> train the joint BPE (37k) -> tokenise every split -> per-example lengths

that is, everything `training.recipe.train` does before the first training step (see `prepare_training_data`). The
child runs twice on the same data and a fresh output folder each time: the first run builds the caches, the
second is what a restarted or repeated run costs. Peak RSS is `ru_maxrss` of the largest single process of the
child's tree (the child or one of its tokenising workers), including the pages of memory-mapped Arrow files it
read, which the kernel can drop at any time; "anon" (memory not backed by a file) and "tree PSS" (all of it) are
peaks of the whole tree's proportional set size, sampled every 0.5 s, so the workers' own memory is counted once
each and the pages they share with the parent once in all. CPU time is user + system of the child and its
descendants. A line per run splits the data path into its phases (reading the text to Arrow, BPE training,
tokenising, the rest), wall and CPU seconds each. Other work on the machine slows wall time more than CPU time:
compare runs by CPU time when it is shared.

    python -m benchmarks.data_scale --sizes 45000,450000          # about 4 minutes on 2 cores
    python -m benchmarks.data_scale --sizes 4500000 --runs 2      # the en-de size

It is a benchmark, not a test: it prints a table and writes JSON, and asserts nothing about time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.lib.corpus import write_corpus

# ---- the measured child ---------------------------------------------------------------------------------------------


class _AnonymousPeak:
    """Samples the memory of this process and its worker processes every 0.5 s, as the sum over the process tree of
    each process's proportional share (PSS: a page shared by n processes, such as the copy-on-write memory of a forked
    worker, counts 1/n in each), so the sum is what the tree occupies:

    * anon: memory not backed by a file (ru_maxrss also counts the pages of memory-mapped Arrow files that were read,
      which the kernel drops under memory pressure, so it overstates what a run needs);
    * total: file-backed pages included (comparable with ru_maxrss, but summed over the tree).
    """

    def __init__(self) -> None:
        import threading

        self.peak_anon_kb = self.peak_total_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def _tree(pid: int) -> list[int]:
        pids, todo = [], [pid]
        while todo:
            current = todo.pop()
            pids.append(current)
            for task in Path(f"/proc/{current}/task").glob("*"):
                try:
                    todo.extend(int(child) for child in (task / "children").read_text().split())
                except (OSError, ValueError):
                    pass  # the process or thread ended meanwhile
        return pids

    def _sample(self) -> None:
        anon = total = 0
        for pid in self._tree(os.getpid()):
            try:
                for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                    if line.startswith("Pss_Anon:"):
                        anon += int(line.split()[1])
                    elif line.startswith("Pss:"):
                        total += int(line.split()[1])
            except OSError:
                pass  # ended meanwhile, or not Linux
        self.peak_anon_kb = max(self.peak_anon_kb, anon)
        self.peak_total_kb = max(self.peak_total_kb, total)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self._sample()

    def stop(self) -> tuple[float, float]:
        self._stop.set()
        self._sample()
        return round(self.peak_anon_kb / 1024, 1), round(self.peak_total_kb / 1024, 1)


def _cpu_seconds() -> float:
    """User + system time of this process (all its threads) and of its waited-for children (worker processes)."""
    own, workers = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime


# The phases of `prepare_training_data`, by the functions train.py calls for them.
_PHASES = {"read": "load_parallel_data", "bpe": "load_or_train_tokenizer", "tokenize": "tokenize_splits"}


def _time_phases(train) -> dict[str, dict[str, float]]:
    """Wrap the functions `train` calls for each phase so that each records its wall and CPU seconds."""
    phases: dict[str, dict[str, float]] = {}

    def timed(phase: str, function):
        def wrapper(*args, **kwargs):
            wall, cpu = time.monotonic(), _cpu_seconds()
            try:
                return function(*args, **kwargs)
            finally:
                spent = phases.setdefault(phase, {"wall_s": 0.0, "cpu_s": 0.0})
                spent["wall_s"] = round(spent["wall_s"] + time.monotonic() - wall, 2)
                spent["cpu_s"] = round(spent["cpu_s"] + _cpu_seconds() - cpu, 2)

        return wrapper

    for phase, name in _PHASES.items():
        setattr(train, name, timed(phase, getattr(train, name)))
    return phases


def _other_phase(total_wall: float, phases: dict[str, dict[str, float]]) -> dict[str, float]:
    return {"wall_s": round(total_wall - sum(p["wall_s"] for p in phases.values()), 2)}


def child(args: argparse.Namespace) -> None:
    """Run the data path of `training.recipe.train` once and print one JSON line of timings."""
    anonymous = _AnonymousPeak()
    started = time.monotonic()
    from hf_vaswani_training.recipe import train

    phases = _time_phases(train)
    model_args, data_args, training_args = train.parse_arguments(
        [
            "--data_dir", args.corpus, "--source_lang", "en", "--target_lang", "de",
            "--vocab_size", str(args.vocab_size), "--output_dir", args.output_dir,
            "--max_source_length", "256", "--max_target_length", "256", "--long_sentences", "truncate",
            "--max_tokens", "25000", "--report_to", "none",
        ]
        + (["--preprocessing_num_workers", str(args.workers)] if args.workers else [])
    )  # fmt: skip
    imported = time.monotonic()
    prepared = train.prepare_training_data(model_args, data_args, training_args)
    lengths = train.training_lengths(prepared.tokenized["train"])
    done = time.monotonic()
    anon_mb, total_mb = anonymous.stop()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)  # num_proc workers, if any
    print(
        "RESULT "
        + json.dumps(
            {
                "import_s": round(imported - started, 2),
                "data_path_s": round(done - imported, 2),
                "train_examples": len(lengths[0]),
                "source_tokens": int(lengths[0].sum()),
                "target_tokens": int(lengths[1].sum()),
                "vocab": len(prepared.tokenizer),
                "peak_rss_mb": round(max(usage.ru_maxrss, workers.ru_maxrss) / 1024, 1),
                "peak_anon_rss_mb": anon_mb,
                "peak_tree_pss_mb": total_mb,
                "phases": {**phases, "other": _other_phase(done - imported, phases)},
            }
        ),
        flush=True,
    )


def measure(corpus: Path, output_dir: Path, vocab_size: int, env: dict[str, str], workers: int | None) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    command = [
        sys.executable,
        "-m",
        "benchmarks.data_scale",
        "--child",
        "--corpus",
        str(corpus),
        "--output-dir",
        str(output_dir),
    ]
    command += ["--vocab-size", str(vocab_size)] + (["--workers", str(workers)] if workers else [])
    proc = subprocess.run(command, env=env, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-5000:] + proc.stderr[-5000:])
        raise SystemExit(f"the data path failed (exit {proc.returncode})")
    result = next(json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    result.update(
        wall_s=round(wall, 1),
        cpu_s=round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1),
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="45000,450000", help="Comma-separated training pair counts.")
    parser.add_argument("--runs", type=int, default=2, help="Runs per size: the first builds caches.")
    parser.add_argument("--vocab-size", type=int, default=37000)
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="Pass --preprocessing_num_workers N to the training arguments (tokenising processes and the tokenizer's "
        "threads); default: all cores. --workers 1 is the one-core reference for a speed-up.",
    )
    parser.add_argument("--workdir", default="/tmp/vaswani_data_scale", help="Corpus and caches (not the repo).")
    parser.add_argument("--json", default=None, help="Also write the results here.")
    parser.add_argument("--keep-cache", action="store_true", help="Start from existing caches (default: clear).")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--output-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    workdir = Path(args.workdir)
    cache = workdir / "hf_cache"
    env = dict(os.environ, HF_DATASETS_CACHE=str(cache), HF_HUB_OFFLINE="1")
    env.pop("TOKENIZERS_PARALLELISM", None)  # what a user's shell has: the project decides
    load = os.getloadavg()[0]
    print(f"cpus={os.cpu_count()} load average={load:.1f} (other work on the machine slows wall time, not CPU time)")
    rows = []
    for size in [int(s) for s in args.sizes.split(",")]:
        t0 = time.monotonic()
        corpus = write_corpus(workdir / f"corpus-{size}", size)
        print(f"corpus of {size} pairs ready in {time.monotonic() - t0:.0f}s: {corpus}", flush=True)
        if not args.keep_cache and cache.exists():
            shutil.rmtree(cache)
        for run in range(1, args.runs + 1):
            output_dir = workdir / f"out-{size}-{run}"
            shutil.rmtree(output_dir, ignore_errors=True)
            result = measure(corpus, output_dir, args.vocab_size, env, args.workers)
            result.update(pairs=size, run=run, workers=args.workers or "all")
            rows.append(result)
            print(json.dumps(result), flush=True)
            shutil.rmtree(output_dir, ignore_errors=True)

    print(
        f"\n{'pairs':>9} {'run':>3} {'wall s':>8} {'CPU s':>8} {'peak RSS MB':>12} {'anon MB':>8} "
        f"{'tree PSS MB':>11} {'src tokens':>12} {'vocab':>6}"
    )
    for r in rows:
        print(
            f"{r['pairs']:>9} {r['run']:>3} {r['wall_s']:>8} {r['cpu_s']:>8} {r['peak_rss_mb']:>12} "
            f"{r.get('peak_anon_rss_mb', '-'):>8} {r.get('peak_tree_pss_mb', '-'):>11} {r['source_tokens']:>12} "
            f"{r['vocab']:>6}"
        )
    print("\nper phase, wall s / CPU s (CPU includes worker processes; other = lengths and glue, wall only):")
    for r in rows:
        phases = r.get("phases", {})
        cells = [
            f"{name} {p['wall_s']:.1f}" + (f" / {p['cpu_s']:.1f}" if "cpu_s" in p else "") for name, p in phases.items()
        ]
        print(f"{r['pairs']:>9} run {r['run']} (workers: {r.get('workers', 'all')}): " + ", ".join(cells))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
