#!/usr/bin/env bash
# The numeric tests (marker `numeric`: tests/model/test_modeling.py, tests/model/test_generation.py and the
# CTranslate2 comparisons in tests/serving/test_ctranslate2_export.py) again under the instruction sets and thread
# counts a developer's machine does not use, so that a bound that only holds on one CPU fails here and not on a
# user's machine (issue 21).
#   ATEN_CPU_CAPABILITY=default / avx2   PyTorch's kernels for CPUs without AVX2 / without AVX-512
#   CT2_FORCE_CPU_ISA=GENERIC / AVX2     CTranslate2's own kernels (softmax, layer norm, quantization)
#   ONEDNN_MAX_CPU_ISA=AVX2              CTranslate2's int8 matrix products as on a CPU without VNNI (AMD EPYC before
#                                        Zen 4): CT2_FORCE_CPU_ISA does not reach oneDNN, this variable does
#   HF_VASWANI_TEST_THREADS=3            3 intra-op threads for torch and CTranslate2 (reductions split otherwise)
# Every other run here, and the main `pytest -q`, uses 1 thread (tests/conftest.py). About 3-4 min on 2 cores.
# torch.compile tests skip themselves under ATEN_CPU_CAPABILITY=default (Inductor's C++ code generation fails there
# on torch 2.13: a torch limitation, stated in the skip reason).
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH_TESTS=(tests/model/test_modeling.py tests/model/test_generation.py)
CT2_TESTS=(tests/serving/test_ctranslate2_export.py)
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT

run() {  # run NAME ENV... -- PYTEST ARGS...
    local name=$1 start env=()
    shift
    while [[ $1 != -- ]]; do env+=("$1"); shift; done
    shift
    start=$(date +%s)
    echo "== $name"
    if ! env "${env[@]}" python -m pytest -q -p no:cacheprovider -m numeric "$@" > "$LOG" 2>&1; then
        tail -n 60 "$LOG"
        exit 1
    fi
    echo "   $(tail -n 1 "$LOG") ($(($(date +%s) - start)) s)"
}

run "PyTorch ATEN_CPU_CAPABILITY=default" ATEN_CPU_CAPABILITY=default -- "${TORCH_TESTS[@]}"
run "PyTorch ATEN_CPU_CAPABILITY=avx2" ATEN_CPU_CAPABILITY=avx2 -- "${TORCH_TESTS[@]}" -m "numeric and not slow"
run "CTranslate2 CT2_FORCE_CPU_ISA=GENERIC" CT2_FORCE_CPU_ISA=GENERIC -- "${CT2_TESTS[@]}"
run "CTranslate2 CT2_FORCE_CPU_ISA=AVX2 ONEDNN_MAX_CPU_ISA=AVX2" CT2_FORCE_CPU_ISA=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 \
    -- "${CT2_TESTS[@]}"
run "3 threads" HF_VASWANI_TEST_THREADS=3 OMP_NUM_THREADS=3 -- "${TORCH_TESTS[@]}" "${CT2_TESTS[@]}" \
    -m "numeric and not slow"
