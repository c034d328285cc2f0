#!/usr/bin/env bash
# The scaling table of docs/PERFORMANCE.md (issue #22): every row is one
# `vitlab bench --backend all --against-pytorch` invocation (flex, LibTorch and PyTorch
# eager measured in the same invocation), its JSON saved as OUT/NAME.json; then
# `python3 tools/scaling_table.py OUT` prints the Markdown table.
#
#   tools/scaling.sh [--pause RUN] [--only NAME,...] OUT
#
# --pause RUN   SIGSTOP tools/long_run.sh's RUN for the measurements (SIGCONT after, also on error)
# --only        the rows to run (names below), e.g. --only tiny-b128,small-b128
# Environment: VITLAB (default target/release/vitlab, a `--features tch` build),
# PYTHON (default .venv/bin/python: torch==2.9.0 torchvision==0.24.0 timm==1.0.31 safetensors,
# and pytorch-fid==0.3.0 for the FID row; pin torch in the same pip command, as pytorch-fid
# otherwise pulls the newest torch),
# STEPS (4), WARMUP (1), ROUNDS (1), COMPILE (1: also time torch.compile in the same
# invocation, `vitlab bench --compile`; its compilation runs in the warm-up steps).
# The machine should be otherwise idle: ratios within one invocation are what count.
set -euo pipefail
cd "$(dirname "$0")/.."
pause= only=
while [ $# -gt 1 ]; do
    case $1 in
    --pause) pause=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
out=${1:?usage: tools/scaling.sh [--pause RUN] [--only NAME,...] OUT}
vitlab=${VITLAB:-target/release/vitlab}
python=${PYTHON:-.venv/bin/python}
steps=${STEPS:-4} warmup=${WARMUP:-1} rounds=${ROUNDS:-1}
compile=()
if [ "${COMPILE:-0}" = 1 ]; then compile=(--compile); fi
torch_lib=$("$python" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
export LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[ -x "$vitlab" ] || { echo "no vitlab binary at $vitlab (build with --features tch, or set VITLAB)" >&2; exit 1; }

# name | bench arguments
rows=(
    "tiny-b128|--model vit-tiny --image-size 32 --patch-size 4 --batch 128 --infer-batch 256"
    "small-b128|--model vit-small --image-size 32 --patch-size 4 --batch 128 --infer-batch 256"
    "base-b128|--model vit-base --image-size 32 --patch-size 4 --batch 128 --infer-batch 256"
    "tiny-64px|--model vit-tiny --image-size 64 --patch-size 4 --batch 32 --infer-batch 64"
    "tiny-128px|--model vit-tiny --image-size 128 --patch-size 4 --batch 8 --infer-batch 16"
    "tiny-224px-p16|--model vit-tiny --image-size 224 --patch-size 16 --batch 64 --infer-batch 128"
    "tiny-b32|--model vit-tiny --image-size 32 --patch-size 4 --batch 32 --infer-batch 32"
    "tiny-b256|--model vit-tiny --image-size 32 --patch-size 4 --batch 256 --infer-batch 256"
    "cyclegan-32px|--model vitunet-tiny --image-size 32 --patch-size 4 --batch 1"
    "cyclegan-64px|--model vitunet-tiny --image-size 64 --patch-size 4 --batch 1"
    "fid-299|--model inception-fid --image-size 32 --infer-batch 50"
)

if [ -n "$pause" ]; then
    tools/long_run.sh pause "$pause"
    trap 'tools/long_run.sh cont "$pause"' EXIT
fi
mkdir -p "$out"
git rev-parse --short HEAD > "$out/COMMIT"
for row in "${rows[@]}"; do
    name=${row%%|*} args=${row#*|}
    if [ -n "$only" ] && [[ ",$only," != *",$name,"* ]]; then continue; fi
    echo "== $name: vitlab bench $args (at $(date -u +%T))"
    # shellcheck disable=SC2086
    "$vitlab" bench $args --backend all --against-pytorch --python "$python" \
        --steps "$steps" --warmup "$warmup" --rounds "$rounds" "${compile[@]}" --format json > "$out/$name.json.tmp"
    mv "$out/$name.json.tmp" "$out/$name.json"
done
echo "done: python3 tools/scaling_table.py $out"
