#!/usr/bin/env bash
# `make run`: the raw benchmark for every transport at 4 KiB, 128 KiB and 1 MiB, as one table.
# ucx runs over whatever UCX_TLS selects (by default shared memory here, as both ends share a
# host); ofi+shm and ofi+tcp over libfabric's shm and tcp;ofi_rxm providers.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/wirespeed}
rows=()
for transport in tcp shm ucx ofi+shm ofi+tcp; do
  for size in 4096 131072 1048576; do
    rows+=("$("$BIN" bench raw --transport "$transport" --size "$size" --json)")
  done
done
printf '%s\n' "${rows[@]}" | python3 "scripts/table.py"

# A short timeslice-building run: 2 input and 2 compute node processes over shm, each
# scheduler in turn (every CRC checked).
for scheduler in rr dfs; do
  echo
  echo "fles run --local 2:2 --transport shm --scheduler $scheduler --timeslices 2000:"
  "$BIN" fles run --local 2:2 --transport shm --scheduler "$scheduler" --timeslices 2000 --interval-length 40
done
