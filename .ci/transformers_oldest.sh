#!/usr/bin/env bash
# The oldest transformers release the model supports (the lower bound of SUPPORTED_TRANSFORMERS; the newest is the
# main environment): a folder saved by this checkout loads with trust_remote_code in a fresh process on that release,
# where hf_vaswani is not importable, and generate() (defaults, greedy, sampling) gives the same tokens as here.
# The release is installed into .transformers_envs/ inside the clone (--no-deps, plus what it pins differently);
# pip's cache is off so nothing is written outside the clone. About 1-2 min.
set -euo pipefail
cd "$(dirname "$0")/.."

oldest=$(python -c "from hf_vaswani.configuration_vaswani import SUPPORTED_TRANSFORMERS as s; print(s.split('>=')[1].split(',')[0])")
PIP_NO_CACHE_DIR=1 python scripts/check_transformers_versions.py --versions "$oldest"
