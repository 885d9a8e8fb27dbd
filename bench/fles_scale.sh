#!/usr/bin/env bash
# Timeslice building at cluster scale in SimGrid (`wirespeed fles simulate`): round robin
# against the DFS at 64, 128, 192 and 384 nodes on the shipped Cray XC40, beside the seed's
# table (../shared/seeds/001: FLESnet and DFS on a real XC40); then a 25 % bandwidth drop and
# how the DFS's intervals recover; then one input slowed to half speed with writes not held back
# (what made FLESnet's buffers fill); then 1,024 nodes for the simulator's own time and memory.
#
#   bench/fles_scale.sh [BINARY]     (default target/release/wirespeed)
#
# Settings (environment): SIZES ("64 128 192 384"), ROUNDS (timeslices per compute node, 10),
# BUFFER (data ring per input, bytes: 2 MiB, 32 components, where the seed's 32 MiB would need
# runs 16 times longer to fill), IN_FLIGHT (components an input has in flight at once, 1),
# BIG (1024; 0 skips it), SLOW_SIZES (node counts for the slow input, "64 128"), SLOW_TS
# (their timeslices, 5120: enough for round robin's buffers to fill up to 128 nodes; 192 nodes
# take 7680, 7 minutes here, and 384 nodes 15360, over an hour), SLOW_IN_FLIGHT (4).
#
# About 8 minutes here, most of it the 384-node DFS run (bench/RESULTS.md).
set -euo pipefail
bin=${1:-target/release/wirespeed}
sizes=${SIZES:-64 128 192 384}
rounds=${ROUNDS:-10}
buffer=${BUFFER:-2097152}
in_flight=${IN_FLIGHT:-1}
big=${BIG:-1024}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# The seed's medians of timeslice completion (ms) and aggregate bandwidth (share of a
# libfabric benchmark on the same nodes).
declare -A seed_ms=([64,rr]=267.72 [128,rr]=957.44 [192,rr]=1674.30 [384,rr]=4223.63
                    [64,dfs]=5.76 [128,dfs]=21.29 [192,dfs]=49.54 [384,dfs]=138.93)
declare -A seed_bw=([128,rr]="66 %" [192,rr]="55 %" [384,rr]="54 %" [128,dfs]="99.5 %" [192,dfs]="77 %" [384,dfs]="83 %")

field() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

# One row per scheduler and the ratio: run_pair NODES TIMESLICES IN_FLIGHT [more flags].
run_pair() {
  local n=$1 ts=$2 flight=$3 computes=$(($1 / 2))
  shift 3
  for s in rr dfs; do
    r=$out/$n-$s.json
    "$bin" fles simulate --platform xc40 --nodes "$n" --scheduler "$s" --timeslices "$ts" \
      --interval-length $((2 * computes)) --buffer-size "$buffer" --in-flight "$flight" --report "$r" "$@" >/dev/null
    seed_fill=$([ "$s" = rr ] && echo "~100 %" || echo "~10 %")
    printf '%5s %-4s | %8.2f (%s) | %8.1f (%s) | %4.0f %% (%s) | %.3f, %.0f, %.0f\n' "$n" "$s" \
      "$(field "$r" 'r["completion_ms"]["p50"]')" "${seed_ms[$n,$s]:--}" \
      "$(field "$r" 'r["aggregate_gbps"]')" "${seed_bw[$n,$s]:--}" \
      "$(field "$r" '100*r["buffer_fill_max"]')" "$seed_fill" \
      "$(field "$r" 'r["run"]["simulation"]["simulated_s"]')" "$(field "$r" 'r["run"]["simulation"]["wall_s"]')" \
      "$(field "$r" 'r["run"]["simulation"]["peak_memory_mib"]')"
  done
  python3 - "$out/$n-rr.json" "$out/$n-dfs.json" <<'EOF'
import json, sys
rr, dfs = (json.load(open(p)) for p in sys.argv[1:])
print("      dfs ÷ rr: completion %.1f × faster, bandwidth %.2f ×" % (
    rr["completion_ms"]["p50"] / max(dfs["completion_ms"]["p50"], 1e-9),
    dfs["aggregate_gbps"] / max(rr["aggregate_gbps"], 1e-9)))
EOF
}

header="nodes sched | completion p50 ms (seed) | aggregate GB/s (seed: share of libfabric) | fill max (seed) | simulated s, wall s, MiB"
echo "$header"
for n in $sizes; do
  run_pair "$n" $((rounds * n / 2)) "$in_flight"
done

echo
echo "25 % bandwidth drop on every link, 64 nodes, DFS without staged speed-up, intervals of 2 rounds:"
"$bin" fles simulate --platform xc40 --nodes 64 --scheduler dfs --timeslices 10000 --interval-length 64 \
  --no-speedup --buffer-size "$buffer" --in-flight "$in_flight" --event drop:0.030-0.045:0.25 | tail -1

echo
slow_flight=${SLOW_IN_FLIGHT:-4}
echo "One input (node-0) on a link at half speed, $slow_flight writes in flight, ${SLOW_TS:-5120} timeslices:"
echo "$header"
for n in ${SLOW_SIZES:-64 128}; do
  run_pair "$n" "${SLOW_TS:-5120}" "$slow_flight" --event drop:0-10:0.5:local_link_from_router_0_to_node_0_
done

if [ "$big" -gt 0 ]; then
  computes=$((big / 2))
  ts=$(( (100000 + computes - 1) / computes ))
  echo
  echo "$big nodes, $ts timeslices ($((ts * computes)) components), dfs:"
  "$bin" fles simulate --platform xc40 --nodes "$big" --scheduler dfs --timeslices "$ts" \
    --interval-length $((2 * computes)) --buffer-size "$buffer" --in-flight "$in_flight" | tail -3
fi
