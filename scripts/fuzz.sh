#!/usr/bin/env bash
# Runs every cargo-fuzz target for FUZZ_SECONDS each (default 60), or for FUZZ_RUNS
# executions, on the nightly toolchain. Installs cargo-fuzz first when it is missing. Not part
# of `make test`; a crash stops the run and leaves its input under fuzz/artifacts/TARGET/.
#   FUZZ_SECONDS=600 make fuzz          every target, ten minutes each
#   FUZZ_RUNS=10000000 make fuzz        every target, ten million executions each
#   FUZZ_TARGETS="frame handshake" make fuzz
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
cargo +nightly fuzz --version >/dev/null 2>&1 || cargo +nightly install --locked cargo-fuzz

seconds="${FUZZ_SECONDS:-60}"
limit=(-max_total_time="$seconds")
[ -n "${FUZZ_RUNS:-}" ] && limit=(-runs="$FUZZ_RUNS")
targets="${FUZZ_TARGETS:-$(cargo +nightly fuzz list --fuzz-dir fuzz)}"
mkdir -p fuzz/logs
for target in $targets; do
    echo "== $target (${limit[*]})"
    mkdir -p fuzz/corpus/"$target"
    cargo +nightly fuzz run --fuzz-dir fuzz "$target" -- \
        "${limit[@]}" -timeout=10 -print_final_stats=1 2>fuzz/logs/"$target".log \
        || { tail -40 fuzz/logs/"$target".log; exit 1; }
    grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' fuzz/logs/"$target".log
done
