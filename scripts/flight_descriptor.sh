#!/usr/bin/env bash
# Compiles crates/wirespeed-flight/proto/flight.proto into the descriptor set that server
# reflection serves (flight.bin, checked in). With --check, fails if flight.bin is stale.
set -euo pipefail
cd "$(dirname "$0")/../crates/wirespeed-flight/proto"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
protoc -I . -I /usr/include --include_imports --descriptor_set_out="$out" flight.proto
if [ "${1:-}" = "--check" ]; then
  cmp -s "$out" flight.bin || { echo "flight.bin is stale: run scripts/flight_descriptor.sh" >&2; exit 1; }
else
  cat "$out" > flight.bin
fi
