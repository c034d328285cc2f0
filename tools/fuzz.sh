#!/usr/bin/env bash
# Fuzz the data layer's parsers (CIFAR binary/pickle/archive readers, the
# pickle reader, the dataset-cache reader) for a bounded time.
#
#   tools/fuzz.sh [SECONDS_PER_TARGET=60] [TARGET...]     targets: cifar cache
#
# With cargo-fuzz installed (cargo install cargo-fuzz; nightly toolchain) it
# runs `cargo +nightly fuzz run`. Without it, it builds the same libFuzzer
# binaries by hand with the SanitizerCoverage flags cargo-fuzz uses (no
# AddressSanitizer: the parsers are safe Rust), which works on stable.
# Crashes land in fuzz/artifacts/<target>/; the corpus grows in fuzz/corpus/.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
SECS=${1:-60}
shift || true
TARGETS=${*:-cifar cache}
HOST=$(rustc -vV | sed -n 's/^host: //p')
# Resolve to the same versions as the main build.
[ -f Cargo.lock ] || cp ../Cargo.lock Cargo.lock

for t in $TARGETS; do
    mkdir -p "corpus/$t" "artifacts/$t"
    cp -n seeds/"$t"/* "corpus/$t/" 2>/dev/null || true
done

FLAGS=(-max_total_time="$SECS" -rss_limit_mb=4096 -max_len=1048576 -timeout=20 -print_final_stats=1)
if cargo +nightly fuzz --help >/dev/null 2>&1; then
    for t in $TARGETS; do
        echo "== cargo fuzz run $t (${SECS}s)"
        cargo +nightly fuzz run -O "$t" "corpus/$t" -- "${FLAGS[@]}" -artifact_prefix="artifacts/$t/"
    done
else
    export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
    # --target keeps the flags off build scripts and proc macros, as cargo-fuzz does.
    cargo build --release --bins --target "$HOST"
    for t in $TARGETS; do
        echo "== $t (${SECS}s)"
        "${CARGO_TARGET_DIR:-target}/$HOST/release/$t" "corpus/$t" "${FLAGS[@]}" -artifact_prefix="artifacts/$t/"
    done
fi
