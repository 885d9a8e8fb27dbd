#!/usr/bin/env bash
# wirespeed's Flight planes against pyarrow.flight, in one run on this machine.
#
# DoGet and DoPut, one stream, at 128 KiB and 2 MiB batches (4 int64 columns): wirespeed over
# grpc, tcp, shm and ucx (`wirespeed bench flight`), plus shm-sealed: shm with the sending
# side's batch in sealed shared memory (`--shared`, sent by reference and never copied); pyarrow
# client and server over grpc+tcp and grpc+unix (bench/flight_perf_pyarrow.py). Medians of RUNS rounds, each running every plane
# once, so that drift of this shared machine hits all alike; ratios against the pyarrow transport
# each target names. Env: RUNS (3), BYTES per stream (1.28 GB: at arrow-flight-benchmark's
# default of 320 MB the fast planes finish in under 0.1 s, where start-up and this machine's
# noise swing results by 2x), PY (the venv python); for the load case at the end, CLIENTS (64),
# GETS (5) and TABLE_MB (200), or LOAD=0 to leave it out.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
BYTES=${BYTES:-1280000000}
PY=${PY:-.venv/bin/python}
WS=${WS:-target/release/wirespeed}
RECORDS=$((BYTES / 32))
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
field() { "$PY" -c "import json,sys; d=json.load(sys.stdin); print(d$1)"; }

port=$(( (RANDOM % 20000) + 30000 ))
"$PY" bench/flight_perf_pyarrow.py serve "grpc+tcp://127.0.0.1:$port" >/dev/null &
"$PY" bench/flight_perf_pyarrow.py serve "grpc+unix://$work/flight.sock" >/dev/null &
sleep 2

printf '%-6s %-8s %-10s %10s %12s   %s\n' method batch plane "MB/s" "p50 lat us" "ratio (vs pyarrow)"
for per_batch in 4096 65536; do
  for method in get put; do
    declare -A mbs=() lat=()
    put_flag=(); [ "$method" = put ] && put_flag=(-test_put)
    one() { # name -> one run's JSON
      case $1 in
        py-tcp) "$PY" bench/flight_perf_pyarrow.py "$method" "grpc+tcp://127.0.0.1:$port" "$RECORDS" "$per_batch" ;;
        py-unix) "$PY" bench/flight_perf_pyarrow.py "$method" "grpc+unix://$work/flight.sock" "$RECORDS" "$per_batch" ;;
        shm-sealed) "$WS" bench flight -transport shm -num_streams 1 -num_threads 1 --shared \
             -records_per_stream "$RECORDS" -records_per_batch "$per_batch" "${put_flag[@]}" --json ;;
        *) "$WS" bench flight -transport "$1" -num_streams 1 -num_threads 1 \
             -records_per_stream "$RECORDS" -records_per_batch "$per_batch" "${put_flag[@]}" --json ;;
      esac
    }
    # Every plane once per round, so that drift of this shared machine hits all alike.
    for _ in $(seq "$RUNS"); do
      for name in py-tcp py-unix grpc tcp shm shm-sealed ucx; do
        out=$(one "$name")
        mbs[$name]+="$(echo "$out" | field "['mb_per_s']") "
        lat[$name]+="$(echo "$out" | field "['latency_us']['p50']") "
      done
    done
    for name in py-tcp py-unix grpc tcp shm shm-sealed ucx; do
      mbs[$name]=$(printf '%s\n' ${mbs[$name]} | median)
      lat[$name]=$(printf '%s\n' ${lat[$name]} | median)
    done
    label="$((per_batch * 32 / 1024))KiB"
    for name in py-tcp py-unix grpc tcp shm shm-sealed ucx; do
      case $name in
        grpc|tcp|ucx) base=py-tcp ;;
        shm|shm-sealed) base=py-unix ;;
        *) base="" ;;
      esac
      ratio=""
      if [ -n "$base" ]; then
        ratio=$(awk -v a="${mbs[$name]}" -v b="${mbs[$base]}" -v la="${lat[$name]}" -v lb="${lat[$base]}" \
          'BEGIN {printf "%.2fx %s, latency %.2gx", a / b, "'"$base"'", la / lb}')
      fi
      printf '%-6s %-8s %-10s %10.0f %12.1f   %s\n' "$method" "$label" "$name" "${mbs[$name]}" "${lat[$name]}" "$ratio"
    done
    unset mbs lat
  done
done

# Load: CLIENTS x GETS DoGets of one TABLE_MB table at once on every plane, against one client
# alone; the server's peak and idle RSS (bench/flight_load.py).
if [ "${LOAD:-1}" != 0 ]; then
  echo
  "$PY" bench/flight_load.py "$WS"
fi
