#!/usr/bin/env bash
# The numeric tests (marker `numeric`: tests/model/test_modeling.py, tests/model/test_generation.py and the
# CTranslate2 comparisons in tests/serving/test_ctranslate2_export.py) again under the instruction sets and thread
# counts a developer's machine does not use, so that a bound that only holds on one CPU fails here and not on a
# user's machine (issue 21).
#   ATEN_CPU_CAPABILITY=default / avx2   PyTorch's kernels for CPUs without AVX2 / without AVX-512
#   CT2_FORCE_CPU_ISA=GENERIC / AVX2     CTranslate2's own kernels (softmax, layer norm, quantization)
#   ONEDNN_MAX_CPU_ISA=AVX2 CT2_USE_MKL=0 CTranslate2's int8 matrix products as on a CPU without VNNI (AMD EPYC before
#                                        Zen 4): CT2_FORCE_CPU_ISA does not reach oneDNN, this variable does; on an
#                                        Intel CPU CTranslate2 takes MKL's int8 GEMM unless CT2_USE_MKL=0
#   HF_VASWANI_TEST_THREADS=3            3 intra-op threads for torch and CTranslate2 (reductions split otherwise)
#   ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2
#                                        a CPU without native bf16 (AMD EPYC before Zen 4, Intel before Cooper Lake):
#                                        oneDNN capped at AVX2 has no bf16 kernels, so torch takes its generic bf16
#                                        path (a 512x512 bf16 mm: 0.1-0.2 GFLOP/s against 68-102 native on this
#                                        project's AMX Xeon, torch.ops.mkldnn._is_mkldnn_bf16_supported() False;
#                                        ATEN_CPU_CAPABILITY alone leaves bf16 native). Every test whose code names
#                                        bf16/bfloat16 runs under it (the list is made from the tests' source).
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
run "CTranslate2 CT2_FORCE_CPU_ISA=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 CT2_USE_MKL=0" CT2_FORCE_CPU_ISA=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 CT2_USE_MKL=0 \
    -- "${CT2_TESTS[@]}"
# No native bf16: check that the switch takes (oneDNN reports no bf16), then every test that touches bf16.
NO_BF16=(ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2)
env "${NO_BF16[@]}" python -c "import sys, torch; sys.exit(torch.ops.mkldnn._is_mkldnn_bf16_supported())" || {
    echo "ONEDNN_MAX_CPU_ISA=AVX2 did not turn native bf16 off"; exit 1; }
mapfile -t BF16_TESTS < <(python - <<'PY'
import ast, pathlib, re
for path in sorted(pathlib.Path("tests").rglob("test_*.py")):
    source = path.read_text()
    if not re.search(r"bf16|bfloat16", source):
        continue
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            first = min([node.lineno] + [decorator.lineno for decorator in node.decorator_list])
            if re.search(r"bf16|bfloat16", "\n".join(source.splitlines()[first - 1 : node.end_lineno])):
                print(f"{path}::{node.name}")
PY
)
run "no native bf16: ${NO_BF16[*]} (${#BF16_TESTS[@]} tests)" "${NO_BF16[@]}" -- "${BF16_TESTS[@]}" -m ""
run "3 threads" HF_VASWANI_TEST_THREADS=3 OMP_NUM_THREADS=3 -- "${TORCH_TESTS[@]}" "${CT2_TESTS[@]}" \
    -m "numeric and not slow"
