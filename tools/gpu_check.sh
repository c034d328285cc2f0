#!/usr/bin/env bash
# The GPU machine's check (issue #21): one call under 10 minutes that
#   0. records what the machine has (GPU, driver, python/torch, what the binary needs to load),
#   1. runs the parity tests' CUDA cases (fp32: tests/parity.rs; bf16 against autocast: tests/bf16.rs),
#   2. benches vitlab against PyTorch eager and torch.compile on the same GPU, fp32 and bf16:
#      ViT-Tiny/4 at 32 px (batch 128), ViT-Base/16 at 224 px (batch 64), a CycleGAN iteration,
#   3. trains 2 ranks on the one GPU through MPI (when the machine has mpiexec),
#   4. trains configs/strong-cifar10.toml on the GPU for the minutes that remain, resuming the run
#      that an earlier call left in gpu-run/ (carry it) and copying it back under $OUT,
# each step under its own time limit, writing JSON and logs under $OUT (summary.json lists
# every step: ok, failed or skipped, and why).
#
#   tools/gpu_check.sh build     # here: the CUDA-capable binaries (see docs/DISTRIBUTED.md's CUDA build),
#                                # stripped and packed into gpu-dist/ (carry it)
#   tools/gpu_check.sh           # on the device machine (from the repo root, $OUT set by `run`)
#   tools/gpu_check.sh --cpu     # the same script end to end on this CPU: backend tch, tiny sizes,
#                                # synthetic data, a one-minute run; what CI-less machines can check
#
# Environment: OUT (default ./gpu-check-out), PYTHON (default /opt/torch/.venv/bin/python, else
# .venv/bin/python), BUDGET_S (seconds for the whole call, default 540), DATA (a CIFAR-10 folder
# for step 4; default: gpu-dist/'s or ../shared/data's cifar10-jpeg.tar.gz unpacked into data/, else
# a synthetic dataset).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MODE=gpu
[ "${1:-}" = --cpu ] && MODE=cpu
if [ "${1:-}" = build ]; then
    set -e
    venv=${VENV:-.venv}
    LIBTORCH_USE_PYTORCH=1 LIBTORCH_BYPASS_VERSION_CHECK=1 PATH=$ROOT/$venv/bin:$PATH \
        cargo build --release -p vitlab-cli --features tch
    LIBTORCH_USE_PYTORCH=1 LIBTORCH_BYPASS_VERSION_CHECK=1 PATH=$ROOT/$venv/bin:$PATH \
        cargo test --release -p vitlab --features tch --test parity --test bf16 --no-run 2>&1 | tee /tmp/gpu-build.log
    mkdir -p gpu-dist
    cp target/release/vitlab gpu-dist/vitlab
    for t in parity bf16; do
        bin=$(ls -t target/release/deps/$t-* | grep -v '\.d$' | head -1)
        cp "$bin" "gpu-dist/test-$t"
    done
    strip gpu-dist/vitlab gpu-dist/test-*
    cp ../shared/data/cifar10-jpeg.tar.gz gpu-dist/ 2>/dev/null || echo "no ../shared/data/cifar10-jpeg.tar.gz: step 4 will train on synthetic data"
    grep -qx '/gpu-dist/' .git/info/exclude 2>/dev/null || echo '/gpu-dist/' >> .git/info/exclude
    du -sh gpu-dist
    exit 0
fi

OUT=${OUT:-$ROOT/gpu-check-out}
mkdir -p "$OUT"
BUDGET_S=${BUDGET_S:-540}
START=$(date +%s)
left() { echo $((BUDGET_S - ($(date +%s) - START))); }
if [ -z "${PYTHON:-}" ]; then
    if [ -x /opt/torch/.venv/bin/python ]; then PYTHON=/opt/torch/.venv/bin/python; else PYTHON=$ROOT/.venv/bin/python; fi
fi
TORCH_LIB=$("$PYTHON" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="$TORCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
BIN=${VITLAB_BIN:-}
if [ -z "$BIN" ]; then
    if [ -x gpu-dist/vitlab ]; then BIN=$ROOT/gpu-dist/vitlab; else BIN=$ROOT/target/release/vitlab; fi
fi
TESTS=${TESTS:-$ROOT/gpu-dist}
export VITLAB_FIXTURES=$ROOT/crates/vitlab/tests/fixtures
if [ $MODE = gpu ]; then BACKEND=tch-cuda; DEVICE=cuda; else BACKEND=tch; DEVICE=cpu; fi
SUMMARY=$OUT/summary.json
echo "{\"mode\": \"$MODE\", \"backend\": \"$BACKEND\", \"steps\": [" > "$SUMMARY"
first=1
# record NAME STATUS NOTE
record() {
    [ $first = 1 ] || echo "," >> "$SUMMARY"
    first=0
    printf '  {"step": "%s", "status": "%s", "note": "%s", "at_s": %d}' "$1" "$2" "$3" $(($(date +%s) - START)) >> "$SUMMARY"
    echo "== $1: $2 ${3:+($3)}"
}
# step NAME LIMIT_S CMD...: runs CMD with its output in $OUT/NAME.log, under a time limit
step() {
    local name=$1 limit=$2
    shift 2
    if [ "$(left)" -lt 20 ]; then record "$name" skipped "no time left"; return 1; fi
    [ "$limit" -gt "$(left)" ] && limit=$(left)
    timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    case $rc in
        0) record "$name" ok "" ;;
        124|137) record "$name" failed "timed out after ${limit} s" ;;
        *) record "$name" failed "exit $rc, see $name.log" ;;
    esac
    return $rc
}

# 0. What the machine has, and what the binary needs to load there.
facts() {
    echo "--- nvidia-smi"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || true
    echo "--- python"; "$PYTHON" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())'
    echo "--- ldd (missing)"; ldd "$BIN" | grep 'not found' || echo "none missing"
    echo "--- vitlab"; "$BIN" --version
    echo "--- mpiexec"; command -v mpiexec && mpiexec --version | head -2 || echo "no mpiexec"
    echo "--- nproc $(nproc), free -g"; free -g | head -2
}
export PYTHON BIN
export -f facts
step facts 60 bash -c facts
cat "$OUT/facts.log"

# 1. Parity: every case runs on tch and, where LibTorch sees a GPU, on tch-cuda.
for t in parity bf16; do
    if [ -x "$TESTS/test-$t" ]; then
        step "test-$t" 150 "$TESTS/test-$t" --test-threads=1
        grep -h 'test result\|did not run\|panicked' "$OUT/test-$t.log" | sort | uniq -c | head -5
        # A test binary built without the tch feature has no LibTorch cases (bf16: none at all).
        if grep -q 'test result: ok. 0 passed' "$OUT/test-$t.log"; then
            record "test-$t-count" failed "no test ran: $TESTS/test-$t was built without the tch feature"
        fi
    else
        record "test-$t" skipped "no test binary $TESTS/test-$t (tools/gpu_check.sh build)"
    fi
done

# 2. Benches against PyTorch on the same device, eager and torch.compile, fp32 and bf16.
bench() {
    local name=$1
    shift
    step "$name" "$BENCH_LIMIT" "$BIN" bench --backend "$BACKEND" --against-pytorch --compile --python "$PYTHON" \
        --format json "$@" && sed -n '/^\[/,$p' "$OUT/$name.log" > "$OUT/$name.json"
}
if [ $MODE = gpu ]; then
    BENCH_LIMIT=100
    for p in fp32 bf16; do
        bench "bench-tiny-$p" --model vit-tiny --image-size 32 --patch-size 4 --batch 128 --infer-batch 256 --steps 20 --warmup 5 --precision $p
        bench "bench-base224-$p" --model vit-base --image-size 224 --patch-size 16 --batch 64 --infer-batch 64 --steps 10 --warmup 3 --precision $p
    done
    bench bench-cyclegan --model vitunet-tiny --image-size 64 --patch-size 4 --batch 4 --steps 10 --warmup 3 --only train
else
    BENCH_LIMIT=240
    bench bench-tiny-bf16 --model vit-tiny --image-size 32 --patch-size 4 --batch 8 --infer-batch 8 --steps 1 --warmup 1 --precision bf16
fi

# 3. Two ranks on the one device through MPI.
RUNS=$OUT/runs
mkdir -p "$RUNS"
if command -v mpiexec > /dev/null; then
    extra=()
    mpiexec --version 2>&1 | grep -qi openrte && extra=(--allow-run-as-root --oversubscribe)
    step mpi-2-ranks 90 mpiexec "${extra[@]}" -n 2 "$BIN" train --config configs/demo-synthetic.toml \
        --set "backend=\"$BACKEND\"" --set epochs=1 --out "$RUNS/mpi" --quiet
else
    record mpi-2-ranks skipped "no mpiexec on this machine"
fi

# 4. The strong recipe on the GPU for the minutes that remain, resumable across calls.
DATA=${DATA:-}
if [ -z "$DATA" ] && [ $MODE = gpu ]; then
    for tgz in gpu-dist/cifar10-jpeg.tar.gz ../shared/data/cifar10-jpeg.tar.gz; do
        if [ -f $tgz ]; then
            mkdir -p data && { [ -d data/cifar10 ] || tar xzf $tgz -C data; } && DATA=$ROOT/data/cifar10
            break
        fi
    done
fi
if [ $MODE = gpu ] && [ -n "$DATA" ]; then
    config=(--config configs/strong-cifar10.toml --set "data.path=\"$DATA\"")
else
    config=(--config configs/demo-synthetic.toml --set epochs=1000)
fi
run_dir=$ROOT/gpu-run
if [ -f "$run_dir/checkpoints/latest.safetensors" ]; then
    train=(train --resume "$run_dir" --set "backend=\"$BACKEND\"")
else
    train=(train "${config[@]}" --set "backend=\"$BACKEND\"" --out "$run_dir")
fi
remaining=$(( $(left) - 30 ))
if [ $MODE = cpu ] && [ $remaining -gt 60 ]; then remaining=60; fi
if [ $remaining -gt 30 ]; then
    # Stopped by the time limit: the next call resumes from the last checkpoint (every epoch
    # and every checkpoint.every_steps steps; checkpoints are renamed into place whole).
    timeout --kill-after=20 $remaining "$BIN" "${train[@]}" --quiet > "$OUT/train.log" 2>&1
    rc=$?
    case $rc in 0|124) record train ok "ran ${remaining} s (exit $rc)" ;; *) record train failed "exit $rc, see train.log" ;; esac
    if [ -f "$run_dir/metrics.csv" ]; then cp "$run_dir/metrics.csv" "$OUT/train-metrics.csv"; fi
    tar -C "$ROOT" -czf "$OUT/gpu-run.tgz" gpu-run 2>/dev/null || true
else
    record train skipped "no time left"
fi
echo "], \"seconds\": $(($(date +%s) - START))}" >> "$SUMMARY"
cat "$SUMMARY"
