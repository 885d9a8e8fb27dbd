#!/usr/bin/env bash
# FLESnet's consumer interface against no consumer at all, in one run on this machine, in turns:
#   null      wirespeed fles run --output null: the compute node checks every CRC itself
#   flesnet   --output shm:NAME with tests/boost/shm_consumer.cpp, a consumer from FLESnet's
#             protocol on libzmq and Boost (one worker: one timeslice per round trip, as
#             fles::TimesliceReceiver takes them), checking every CRC
#   consume   the same with `wirespeed fles consume NAME` (one worker)
#   consume2  `wirespeed fles consume NAME --workers 2`: two workers sharing the timeslices as one
#             group, FLESnet's way to keep the next timeslice coming while one is checked
# at two timeslice sizes (INPUTS inputs of 100 and of 1000 microslices of 4,000 bytes). Every
# figure is the run's aggregate rate, the median of RUNS runs (default 5); GB = 10^9 bytes.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/wirespeed}
RUNS=${RUNS:-5}
INPUTS=${INPUTS:-2}
BYTES=${BYTES:-4800000000}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
g++ -O2 -o "$WORK/shm_consumer" tests/boost/shm_consumer.cpp -lboost_serialization -lzmq -lrt

median() { python3 -c 'import sys,statistics; print(round(statistics.median(float(x) for x in sys.argv[1:]), 2))' "$@"; }
rate() { sed -nE 's/.* ([0-9.]+) GB\/s aggregate/\1/p'; }

run() { # kind microslices-per-timeslice -> GB/s
  local kind=$1 size=$2 name="wsbench-$$"
  local timeslices=$((BYTES / INPUTS / size / 4032))
  local args=(fles run --local "$INPUTS:1" --timeslices "$timeslices" --timeslice-size "$size" --microslice-size 4000)
  case $kind in
    null) "$BIN" "${args[@]}" --output null | rate; return ;;
    flesnet) "$WORK/shm_consumer" "$name" >/dev/null & ;;
    consume) "$BIN" fles consume "$name" >/dev/null & ;;
    consume2) "$BIN" fles consume "$name" --workers 2 >/dev/null & ;;
  esac
  local workers=1
  [ "$kind" = consume2 ] && workers=2
  "$BIN" "${args[@]}" --output "shm:$name?consumers=$workers" | rate
  wait
}

printf '%-10s %8s %8s %8s %8s  (GB/s, median of %s; ratio to null)\n' size null flesnet consume consume2 "$RUNS"
for size in 100 1000; do
  declare -A got=()
  for _ in $(seq "$RUNS"); do
    for kind in null flesnet consume consume2; do
      got[$kind]="${got[$kind]:-} $(run $kind $size)"
    done
  done
  null=$(median ${got[null]})
  line="$(printf '%-10s %8s' "$((size * 4))kB" "$null")"
  for kind in flesnet consume consume2; do
    m=$(median ${got[$kind]})
    line+=$(printf ' %8s' "$m ($(python3 -c "print(round($m / $null, 2))"))")
  done
  echo "$line"
  unset got
done
