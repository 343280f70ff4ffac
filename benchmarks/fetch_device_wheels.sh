#!/usr/bin/env bash
# Wheels the training side needs on the lent GPU machines, which have Python 3.12, torch 2.11 (CUDA 13),
# transformers 5.17, accelerate, peft, pyarrow, pandas, xxhash, fsspec, huggingface_hub 1.33, tokenizers 0.23,
# safetensors 0.8 and sacrebleu, and can download nothing (/work/.library/device/README.md). Missing there:
# transformers >= 5.23 (the recipe is tested on 5.23-5.24), datasets, evaluate and their dill/multiprocess.
# Downloads exactly those, for CPython 3.12 on x86-64 Linux, into .whl/ (git-ignored), --no-deps each, so that
# nothing already on the machine is replaced. benchmarks/gpu_device.sh installs them there.
#
#     bash benchmarks/fetch_device_wheels.sh        # from the repository root; 13 MiB (2026-11-27)
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=(
    transformers==5.24.0
    datasets==5.2.0
    evaluate==0.4.6
    multiprocess==0.70.19
    dill==0.4.1
)
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d .whl "${WHEELS[@]}"
# One version of each: two wheels of one package stop the whole install on the device.
for spec in "${WHEELS[@]}"; do
    name=${spec%%==*}
    count=$(find .whl -maxdepth 1 -iname "${name//-/_}-*.whl" | wc -l)
    if [ "$count" -ne 1 ]; then
        echo "expected one wheel of $name in .whl/, found $count: remove the others" >&2
        exit 1
    fi
done
total=$(du -cb .whl/*.whl | tail -1 | cut -f1)
ls -l .whl/*.whl
echo "total $((total / 1024 / 1024)) MiB in .whl/ (the device carries 64 MiB with the working tree)"
if [ "$total" -gt $((50 * 1024 * 1024)) ]; then
    echo "more than 50 MiB of wheels: the working tree may not fit beside them" >&2
    exit 1
fi
