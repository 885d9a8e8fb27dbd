#!/usr/bin/env bash
# The C library's packages against each language's own Flight gRPC client, in one run: a 0.5 GB
# flight of 128 KiB batches (4 int64 columns, 4096 rows each) from one `wirespeed serve` (its
# cache on, so no reader waits on the disk), read by
#   C++  over shm (wirespeed/flight.hpp)   and arrow::flight::FlightClient (pyarrow's Arrow C++)
#   Go   over shm (go/)                    and arrow-go's flight.Client
#   Java over shm (java/, FFM)             and flight-core's FlightClient
#   Rust over shm (wirespeed-flight's own client): what the C boundary is measured against
#   C    over shm (bench/languages_read.c): the C library with no Arrow library on top
#   DuckDB count(*) over a wirespeed.flight reader (shm) and over a pyarrow.flight one.
# RUNS rounds (5), each running every case once in turn against a server with its cache on and
# one without; each case is one process that reads the flight ten times on one client, and the
# last (warm: a JVM has compiled its loop by about the sixth read) counts. Medians of MB/s.
# Env: PY (the venv's python, with the package put in by scripts/python_dev.sh release), RUNS,
# CASES (a subset of the cases below, rust-shm among them, for a quicker look).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
PY=${PY:-.venv/bin/python}
REL=$PWD/target/release
export PATH=$PATH:$PWD/.tools/go/bin
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

echo "building (release) ..." >&2
cargo build --release --locked --workspace --examples >&2
cases=(${CASES:-rust-shm c-shm cpp-shm cpp-grpc go-shm go-grpc java-shm java-grpc duckdb-shm duckdb-grpc})
[[ " ${cases[*]} " != *duckdb* ]] || bash scripts/python_dev.sh release >&2
g++ -std=c++20 -O2 -I"$("$PY" -c 'import pyarrow; print(pyarrow.get_include())')" -Icrates/wirespeed-c/include \
  crates/wirespeed-c/tests/cpp/flight_test.cpp -o "$work/cpp" \
  "$("$PY" -c 'import pyarrow, glob; d = pyarrow.get_library_dirs()[0]; print(min(glob.glob(d + "/libarrow_flight.so.*"), key=len))')" \
  "$("$PY" -c 'import pyarrow, glob; d = pyarrow.get_library_dirs()[0]; print(min(glob.glob(d + "/libarrow.so.*"), key=len))')" \
  -L"$REL" -lwirespeed_c -Wl,-rpath,"$REL:$("$PY" -c 'import pyarrow; print(pyarrow.get_library_dirs()[0])')"
cc -O2 -Icrates/wirespeed-c/include bench/languages_read.c -o "$work/c" -L"$REL" -lwirespeed_c -Wl,-rpath,"$REL"
(cd go && CGO_LDFLAGS="-L$REL -Wl,-rpath,$REL" go build -o "$work/goread" ./cmd/flightread)
JAVA_HOME=$(bash scripts/jdk.sh 22)
export JAVA_HOME
mvn -q -B -f java/pom.xml test-compile dependency:build-classpath -Dmdep.includeScope=test \
  -Dmdep.outputFile="$work/java.classpath" >&2
jcp="java/target/classes:java/target/test-classes:$(cat "$work/java.classpath")"

mkdir "$work/data"
"$PY" - "$work/data/half.arrow" <<'PY'
import sys
import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
rows = 4096 * 4000
t = pa.table({c: pa.array(np.arange(rows, dtype=np.int64) + i) for i, c in enumerate("abcd")})
feather.write_feather(t, sys.argv[1], compression="uncompressed", chunksize=4096)
PY
BYTES=$((4096 * 4000 * 32))
key="$work/key"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$key"
export WIRESPEED_KEY_FILE=$key
# Two servers of the same file: one with its cache on (shm clients map the cached batches, so
# a read costs only what each batch costs), one without (each read decodes the file and copies
# every batch into the shm ring).
declare -A url
for mode in cached file; do
  port=$(( (RANDOM % 20000) + 30000 ))
  cache=0
  [ $mode = cached ] && cache=1024
  "$REL/wirespeed" serve "$work/data" --listen "127.0.0.1:$port" --key-file "$key" --cache-mb $cache 2>"$work/serve.$mode.log" &
  url[$mode]="grpc://127.0.0.1:$port"
  for _ in $(seq 100); do grep -q "serving" "$work/serve.$mode.log" && break; sleep 0.1; done
done

TIMES=10 # reads per process, on one client; the last (warm: a JVM has compiled its loop by then) counts
java=("$JAVA_HOME/bin/java" --enable-native-access=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED
  --sun-misc-unsafe-memory-access=allow -Dio.netty.tryReflectionSetAccessible=true
  -Dwirespeed.library="$REL/libwirespeed_c.so" -cp "$jcp" io.wirespeed.flight.ReadFlight)
one() { # case url: one process, its last read's line
  local c=$1 u=$2
  case $c in
    rust-shm) WIRESPEED_KEY=$(cat "$key") "$REL/examples/read_flight" "$u" half.arrow shm $TIMES ;;
    c-shm) "$work/c" "$u" "$key" half.arrow $TIMES ;;
    cpp-shm) "$work/cpp" bench "$u" "$key" half.arrow wirespeed $TIMES ;;
    cpp-grpc) "$work/cpp" bench "$u" "$key" half.arrow arrow $TIMES ;;
    go-shm) "$work/goread" wirespeed "$u" half.arrow $TIMES ;;
    go-grpc) "$work/goread" arrow "$u" half.arrow $TIMES ;;
    java-shm) "${java[@]}" wirespeed "$u" half.arrow $TIMES ;;
    java-grpc) "${java[@]}" arrow "$u" half.arrow $TIMES ;;
    duckdb-shm) "$PY" bench/languages_duckdb.py wirespeed "$u" half.arrow $TIMES ;;
    duckdb-grpc) "$PY" bench/languages_duckdb.py pyarrow "$u" half.arrow $TIMES ;;
  esac | tail -1
}
one rust-shm "${url[cached]}" >/dev/null # fills the cache
one rust-shm "${url[cached]}" >/dev/null
for r in $(seq "$RUNS"); do
  for mode in cached file; do
    for c in "${cases[@]}"; do
      out=$(one "$c" "${url[$mode]}" 2>>"$work/errors.log") || { echo "$c failed: $(tail -3 "$work/errors.log")" >&2; exit 1; }
      read -r _ plane _ rows _ seconds <<<"$out"
      [ "$rows" = $((4096 * 4000)) ] || { echo "$c read $rows rows: $out" >&2; exit 1; }
      [ "${c#*-}" = grpc ] || [ "$plane" = shm ] || { echo "$c took $plane" >&2; exit 1; }
      echo "$mode $c $(awk -v b=$BYTES -v s="$seconds" 'BEGIN {printf "%.0f", b / s / 1e6}')" >>"$work/results"
    done
  done
  echo "round $r of $RUNS done" >&2
done

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { if [ -n "$1" ] && [ -n "$2" ]; then awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; else echo -; fi; }
for mode in cached file; do
  declare -A mbs=([cpp-shm]= [cpp-grpc]= [go-shm]= [go-grpc]= [java-shm]= [java-grpc]= [c-shm]= [duckdb-shm]= [duckdb-grpc]=)
  for c in "${cases[@]}"; do mbs[$c]=$(awk -v m=$mode -v c="$c" '$1 == m && $2 == c {print $3}' "$work/results" | median); done
  echo
  [ $mode = cached ] && echo "serve --cache-mb 1024 (shm maps the cached batches):" || echo "serve from the file (shm copies each batch into the ring):"
  printf '%-8s %14s %14s %10s %12s\n' client "shm MB/s" "own gRPC MB/s" "÷ own" "÷ Rust shm"
  for l in cpp go java; do
    printf '%-8s %14s %14s %10s %12s\n' "$l" "${mbs[$l-shm]}" "${mbs[$l-grpc]}" "$(ratio "${mbs[$l-shm]}" "${mbs[$l-grpc]}")" \
      "$(ratio "${mbs[$l-shm]}" "${mbs[rust-shm]}")"
  done
  printf '%-8s %14s %14s %10s %12s\n' c "${mbs[c-shm]}" - - "$(ratio "${mbs[c-shm]}" "${mbs[rust-shm]}")"
  printf '%-8s %14s %14s %10s %12s\n' rust "${mbs[rust-shm]}" - - 1.00
  printf '%-8s %14s %14s %10s %12s\n' duckdb "${mbs[duckdb-shm]}" "${mbs[duckdb-grpc]}" \
    "$(ratio "${mbs[duckdb-shm]}" "${mbs[duckdb-grpc]}")" -
done
echo "(MB = 10^6 bytes; medians of $RUNS rounds, each the last of $TIMES reads on its client; duckdb: count(*),"
echo " its gRPC is pyarrow.flight's reader)"
