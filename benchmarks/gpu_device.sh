#!/usr/bin/env bash
# The device run of issue 22: install the carried wheels, then benchmarks/gpu.py (at most 6 minutes on one
# H100/H200). Prepare once here:
#
#     bash benchmarks/fetch_device_wheels.sh                  # .whl/: transformers 5.24, datasets, evaluate, ...
#
# then call the device tool's `run` with carry [".whl"], timeout_s 480 and the command
#
#     bash benchmarks/gpu_device.sh
#
# The table comes back in $OUT/gpu.md and $OUT/gpu.json (and the log in $OUT/gpu.log). Extra arguments go to
# gpu.py, e.g. `bash benchmarks/gpu_device.sh --skip marian,decoding`.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-bench-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
# hf_vaswani_training is the folder training/ under another name (pyproject.toml's package-dir): a link makes it
# importable without installing the project.
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
# 330 s of phase budgets plus start-up: inside 6 minutes, and a 480 s timeout leaves a rerun inside 15.
timeout 420 python3 benchmarks/gpu.py --budget 330 --out "$OUT/gpu.json" "$@" 2>&1 | tee "$OUT/gpu.log"
exit "${PIPESTATUS[0]}"
