"""One row of benchmarks/gpu.py in a process of its own (`python -m benchmarks.training_speed` or
`benchmarks.decoding_speed`): the command line both take, their log, the row's spec, and the result gpu.py reads back
(`--out`, and a `RESULT {...}` line on stdout).
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

logger = logging.getLogger("gpu_benchmark")

# What every row takes; a script names these in the order its --help shows them, with its own options between.
ROW_OPTIONS = {
    "--data": dict(type=Path, required=True, help="a folder benchmarks/gpu.py prepared"),
    "--spec": dict(required=True, help="the row, as JSON (benchmarks/gpu.py's plan)"),
    "--out": dict(type=Path, default=None, help="the row's result as JSON"),
}


def start_row(doc: str, argv, options: Sequence[str | tuple[str, dict]]) -> tuple[argparse.Namespace, dict]:
    """The arguments and the row's spec. `doc`: the script's docstring (its first paragraph describes it in --help);
    `options`: a `ROW_OPTIONS` flag, or a script's own (flag, add_argument keywords), in --help's order. Then the
    log (our lines at INFO; transformers' at errors only, no progress bars) and the spec's `threads` for torch."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    for option in options:
        flag, keywords = (option, ROW_OPTIONS[option]) if isinstance(option, str) else option
        parser.add_argument(flag, **keywords)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    import torch
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    spec = json.loads(args.spec)
    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    return args, spec


def finish_row(spec: dict, out: Path | None, measure: Callable[[], dict]) -> int:
    """Runs `measure` and reports its result: to `out` and as a `RESULT` line. A row that raises is reported as
    failed (its error's first line) and the caller goes on to the next row."""
    try:
        result = measure()
    except Exception as error:
        logger.exception("%s failed", spec.get("name"))
        result = {"status": f"failed: {type(error).__name__}: {str(error).splitlines()[0][:160] if str(error) else ''}"}
    finally:
        gc.collect()
    text = json.dumps(result, default=str)
    if out is not None:
        out.write_text(text + "\n")
    print("RESULT " + text, flush=True)
    return 0
