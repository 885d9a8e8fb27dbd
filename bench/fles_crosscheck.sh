#!/usr/bin/env bash
# The simulator against reality: the same small run (4 inputs, 4 compute nodes over shm on
# this host, each input at a detector's rate) run for real and simulated on one switch whose
# links have this host's measured shm bandwidth and latency. Prints both runs' throughput and
# completion times, and whether both made the same scheduling decisions (which compute node
# built which timeslice, in what order, and how many DFS intervals).
#
#   bench/fles_crosscheck.sh [BINARY]     (default target/release/wirespeed)
#
# Settings (environment): TIMESLICES (2000), RATE (each input's GB/s, 0.05).
set -euo pipefail
bin=${1:-target/release/wirespeed}
timeslices=${TIMESLICES:-2000}
rate=${RATE:-0.05}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

bw=$("$bin" bench raw --transport shm --size 65536 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["mb_per_s"] / 1e3)')
lat=$("$bin" bench raw --transport shm --op pingpong --size 64 --count 20000 --json |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["latency_us"]["p50"])')
echo "this host: bench raw shm 64 KiB ${bw} GB/s, pingpong p50 ${lat} µs"
# A route crosses two links (the sender's and the receiver's): half the latency on each.
platform="switch:${bw}GBps:$(python3 -c "print($lat / 2)")us"

for s in rr dfs; do
  "$bin" fles run --local 4:4 --transport shm --scheduler "$s" --timeslices "$timeslices" --rate "$rate" \
    --interval-length 16 --report "$out/real-$s.json" >/dev/null
  size=$(python3 -c "import json; r=json.load(open('$out/real-$s.json')); i=r['inputs']; print(round(sum(x['bytes'] for x in i) / ($timeslices * len(i))))")
  # A real input makes a timeslice every 100 microslices of 650 bytes at its rate; its
  # component holds the overlap and descriptors too: the same pace in component bytes.
  sim_rate=$(python3 -c "print($rate * $size / 65000)")
  "$bin" fles simulate --platform "$platform" --sim-cfg network/model:CM02 --inputs 4 --computes 4 \
    --scheduler "$s" --timeslices "$timeslices" --rate "$sim_rate" --interval-length 16 --component-size "$size" \
    --in-flight 1 --buffer-size $((32 << 20)) --report "$out/sim-$s.json" >/dev/null
  python3 - "$s" "$out/real-$s.json" "$out/sim-$s.json" <<'EOF'
import json, sys
s, real, sim = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
def order(r):
    return [[t[0] for t in c["completions"]] for c in sorted(r["computes"], key=lambda c: c["index"])]
def line(name, r):
    c = r["completion_ms"]
    return "%-9s %6.3f GB/s  completion p50 %6.3f ms  p99 %6.3f ms  intervals %d" % (
        name, r["aggregate_gbps"], c["p50"], c["p99"], len(r["computes"][0]["intervals"] or []))
print(s)
print("  " + line("real", real))
print("  " + line("simulated", sim))
same = order(real) == order(sim)
print("  throughput simulated ÷ real %.3f; same timeslices on the same compute nodes in the same order: %s" % (
    sim["aggregate_gbps"] / real["aggregate_gbps"], "yes" if same else "NO"))
EOF
done
