#!/usr/bin/env bash
# Timeslice building against MPI one-sided puts, in one run on this machine, in turns:
#   MPI_Put   bench/mpi/put_many_to_many.c under Open MPI: INPUTS ranks put 64 KiB contributions
#             into windows on COMPUTES ranks (offset round robin, lock_all, flush every 8 puts)
#   fles      wirespeed fles run --local INPUTS:COMPUTES over shm, ucx and tcp, replaying an archive
#             of 64 KiB components (so no generator cost), every CRC checked at the compute nodes
#             (--verify all) or none (--verify none: FLESnet leaves checking to its consumers)
#   raw       wirespeed bench raw over shm, one stream of 64 KiB messages
#   ceiling   bench/mpi/copy_and_crc.c: one core's copy and CRC-32C rates; a builder that
#             checks every CRC copies each byte at least once and reads it again, so on
#             CORES cores it makes at most CORES / (1/copy + 1/crc)
# and rr against dfs at the same size (DFS intervals of INTERVAL timeslices, default 10,000 as
# FLESnet's): completion time and buffer fill. Every figure is the median of RUNS runs
# (default 3); GB = 10^9 bytes. TRANSPORTS picks the fabrics (default "shm ucx tcp").
# 300,000 timeslices (TIMESLICES) are 30 intervals: the DFS's proposals and staged speed-up
# work from the last 10, and its acknowledgement gate, which waits for an interval's last
# timeslices before the next starts, costs a drain per interval, so short intervals pay it
# often (1,000: 0.83 x round robin with --verify all, 10,000: 0.93 x).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/wirespeed}
RUNS=${RUNS:-3}
INPUTS=${INPUTS:-2}
COMPUTES=${COMPUTES:-2}
TIMESLICES=${TIMESLICES:-300000}
INTERVAL=${INTERVAL:-10000}
TRANSPORTS=${TRANSPORTS:-shm ucx tcp}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

MPIRUN=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" -eq 0 ] && MPIRUN+=(--allow-run-as-root)
mpicc -O2 -o "$WORK/put" bench/mpi/put_many_to_many.c
cc -O2 -msse4.2 -o "$WORK/ceiling" bench/mpi/copy_and_crc.c

# 127 core microslices + 1 overlap of 480 bytes, with 32-byte descriptors: 65,536 bytes.
SLICING=(--timeslice-size 127 --overlap 1 --microslice-size 480)
"$BIN" fles run --local "$INPUTS:1" --timeslices 64 "${SLICING[@]}" --output "tsa:$WORK/replay.tsa" >/dev/null

median() { python3 -c 'import sys,statistics; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))$2)" "$1"; }

mpi_put() {
  "${MPIRUN[@]}" -np $((INPUTS + COMPUTES)) "$WORK/put" "$INPUTS" 65536 "$TIMESLICES" | sed -E 's/.*: ([0-9.]+) GB\/s/\1/'
}
fles() { # transport scheduler verify -> report path
  local out="$WORK/$1-$2-$3.json"
  "$BIN" fles run --local "$INPUTS:$COMPUTES" --transport "$1" --scheduler "$2" --interval-length "$INTERVAL" \
    --verify "$3" --timeslices "$TIMESLICES" "${SLICING[@]}" --replay "$WORK/replay.tsa" --report "$out" >/dev/null
  echo "$out"
}
raw() {
  "$BIN" bench raw --transport shm --size 65536 --count 200000 --warmup 10000 --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["mb_per_s"] / 1e3)'
}

declare -A gbps p50 fill
for _ in $(seq "$RUNS"); do
  gbps[mpi]+=" $(mpi_put)"
  for t in $TRANSPORTS; do
    for s in dfs rr; do
      for v in all none; do
        if ! r=$(fles "$t" "$s" "$v"); then
          echo "fles $t $s $v: this run failed; left out" >&2
          continue
        fi
        gbps[$t-$s-$v]+=" $(field "$r" '["aggregate_gbps"]')"
        p50[$t-$s-$v]+=" $(field "$r" '["completion_ms"]["p50"]')"
        fill[$t-$s-$v]+=" $(field "$r" '["buffer_fill_max"]')"
      done
    done
  done
  gbps[raw]+=" $(raw)"
done

mpi=$(median ${gbps[mpi]})
raw_shm=$(median ${gbps[raw]})
rates=$("$WORK/ceiling")
ceiling=$(python3 -c "import re,sys; c,r=map(float,re.findall(r'([0-9.]+) GB/s',sys.argv[1])); print(round($(nproc) / (1/c + 1/r), 2))" "$rates")
echo "$INPUTS inputs, $COMPUTES compute nodes, 64 KiB contributions, $TIMESLICES timeslices, DFS intervals of $INTERVAL, median of $RUNS"
printf '%-22s %10s %10s %10s %12s %10s\n' case GB/s "÷ MPI" "÷ raw shm" "p50 ms" "fill max"
printf '%-22s %10.2f\n' "MPI_Put (Open MPI)" "$mpi"
printf '%-22s %10.2f\n' "bench raw shm 1 stream" "$raw_shm"
printf '%-22s %10.2f %10.2f   (%s, %s cores)\n' "ceiling: copy + CRC" "$ceiling" "$(python3 -c "print($ceiling / $mpi)")" "$rates" "$(nproc)"
for k in $(printf "%s\n" "${!gbps[@]}" | sort); do
  [[ $k == *-*-* ]] || continue
  g=$(median ${gbps[$k]})
  printf '%-22s %10.2f %10.2f %10.2f %12.2f %9.0f%%\n' "fles ${k//-/ }" "$g" \
    "$(python3 -c "print($g / $mpi)")" "$(python3 -c "print($g / $raw_shm)")" \
    "$(median ${p50[$k]})" "$(python3 -c "print(100 * $(median ${fill[$k]}))")"
done
