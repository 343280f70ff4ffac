#!/usr/bin/env bash
# The package as a user gets it: build the wheel, install it (non-editable) into a fresh virtual environment, and
# from an empty temporary directory run the README's commands through the console scripts: the main job shortened
# to a few steps, translate, the model card, an attention plot, the Hub validation and ONNX export. Nothing here can
# see the checkout: a file missing from the wheel, or a path relative to the repository, fails this step.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
started=$SECONDS

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python -m pip wheel --quiet --no-deps --wheel-dir "$work/dist" "$repo"
wheel=$(ls "$work"/dist/hf_vaswani-*.whl)
python - "$wheel" <<'PY'
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
wanted = {"hf_vaswani_training/recipe/recipes/toy.json", "hf_vaswani_training/recipe/templates/model_card.md", "hf_vaswani_training/cli.py"}
missing = wanted - names
assert not missing, f"the wheel lacks {sorted(missing)}"
assert not any(name.startswith("training/") for name in names), "the wheel installs a top-level 'training' package"
PY

python -m venv "$work/venv"
venv_python="$work/venv/bin/python"
# The CPU build of torch first: a bare `torch` requirement would pull the CUDA wheels. --no-compile: byte-compiling
# every installed module (torch has thousands) costs more than this job; what is imported compiles on first use.
"$venv_python" -m pip install --quiet --no-compile torch==2.13.0
"$venv_python" -m pip install --quiet --no-compile "$wheel[plot,export]"
export PATH="$work/venv/bin:$PATH" OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
echo "wheel built and installed in $((SECONDS - started)) s"

mkdir "$work/empty" && cd "$work/empty"
python -c "import hf_vaswani_training as t, sys; assert '/site-packages/' in t.__file__, t.__file__"

# The main job (`vaswani-train toy`), shortened: 6 steps, checkpoints at 3 and 6 averaged, 20 test sentences.
vaswani-train toy --max_steps 6 --save_steps 3 --average_last_n 2 --toy_num_train 2000 --toy_num_test 20 \
    --max_length_offset 10 --report_to none --dataloader_num_workers 0 > train.log
grep -q "Model written to outputs/toy" train.log
grep -q "^test: sacreBLEU" train.log
test -s outputs/toy/README.md && grep -q "sacreBLEU" outputs/toy/README.md   # the model card, filled in
test -s outputs/toy/model.safetensors && test -s outputs/toy/tokenizer.json
# Checkpoints and the averaged copy live in checkpoints/, which the folder's .gitignore keeps out of `hf upload`.
test -s outputs/toy/checkpoints/checkpoint-6/optimizer.pt && grep -qx "checkpoints/" outputs/toy/.gitignore
if grep -E "Do not forget to share|tokenized period|stopped by" train.log; then exit 1; fi   # no noise, not cut short

vaswani-translate outputs/toy "The old dog does not sleep ." "Twenty four birds stand ." \
    --attention-plot attention.png > translations.txt
test "$(wc -l < translations.txt)" -eq 2
python -c "import sys; data = open('attention.png', 'rb').read(); sys.exit(data[:4] != b'\x89PNG' or len(data) < 1000)"

vaswani-push outputs/toy your-name/vaswani-toy --dry-run > /dev/null   # the folder is valid for the Hub
vaswani-export outputs/toy onnx --check --max_new_tokens 12 > export.log
test -s onnx/decoder_step.onnx && grep -q "tokens identical" export.log

# A user error is one line and exit status 2.
set +e
vaswani-translate no-such-folder/model "A ." 2> error.txt
status=$?
set -e
test "$status" -eq 2 && test "$(wc -l < error.txt)" -eq 1

echo "wheel smoke test passed in $((SECONDS - started)) s"
