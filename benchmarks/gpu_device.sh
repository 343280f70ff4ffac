#!/usr/bin/env bash
# The device run of issue 25: install the carried wheels, then `python -m benchmarks.gpu` (about 7.5 minutes on one
# H100/H200; `python -m benchmarks.gpu --dry_run --device cuda` prints the rows and their budgets anywhere).
# Prepare once here:
#
#     bash benchmarks/fetch_device_wheels.sh                  # .whl/: transformers 5.24, datasets, evaluate, ...
#
# then call the device tool's `run` with carry [".whl"], timeout_s 540 and the command
#
#     bash benchmarks/gpu_device.sh
#
# The table comes back in $OUT/gpu.md and $OUT/gpu.json (and the log in $OUT/gpu.log). Extra arguments go to
# benchmarks/gpu.py, e.g. `bash benchmarks/gpu_device.sh --skip compile,marian` for a shorter rerun.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-bench-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
# hf_vaswani_training is the folder training/ under another name (pyproject.toml's package-dir): a link makes it
# importable without installing the project. The repository root (this directory) holds hf_vaswani and benchmarks.
ln -sfn "$PWD/training" /tmp/site/hf_vaswani_training
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
python3 - <<'PY'
import torch, transformers, datasets, evaluate, accelerate
print("python", __import__("sys").version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__,
      "datasets", datasets.__version__, "evaluate", evaluate.__version__, "accelerate", accelerate.__version__)
print("device", torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA")
PY
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.total,power.limit --format=csv 2>/dev/null
# A row that would end, as estimated, after 445 s is skipped (--deadline); the last one ends by about 475 s. A 480 s timeout here, 540 s for the
# device call: with the machine's start (~2 min) about 11 minutes of a 15-minute budget, leaving a shorter rerun.
timeout 480 python3 -m benchmarks.gpu --out "$OUT/gpu.json" "$@" 2>&1 | tee "$OUT/gpu.log"
exit "${PIPESTATUS[0]}"
