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
# `--metrics`: wirespeed's servers serve Prometheus metrics and log every call as a JSON line,
# as an operator runs `serve`. BEFORE=BIN: each wirespeed plane also runs on that build (an
# earlier one, without the flag), in the same rounds, with the ratio of ours to it.
set -euo pipefail
cd "$(dirname "$0")/.."
metrics=()
for arg in "$@"; do
  case $arg in
    --metrics) metrics=(--metrics) ;;
    *) echo "usage: $0 [--metrics]" >&2; exit 2 ;;
  esac
done
BEFORE=${BEFORE:-}
names=(py-tcp py-unix grpc tcp shm shm-sealed ucx)
[ -n "$BEFORE" ] && names+=(grpc@before tcp@before shm@before shm-sealed@before ucx@before)
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

printf '%-6s %-8s %-17s %10s %12s   %s\n' method batch plane "MB/s" "p50 lat us" "ratio (vs pyarrow)"
for per_batch in 4096 65536; do
  for method in get put; do
    declare -A mbs=() lat=()
    put_flag=(); [ "$method" = put ] && put_flag=(-test_put)
    one() { # name -> one run's JSON
      local bin=$WS flags=("${metrics[@]}") plane=${1%@before}
      if [ "$plane" != "$1" ]; then bin=$BEFORE; flags=(); fi
      case $plane in
        py-tcp) "$PY" bench/flight_perf_pyarrow.py "$method" "grpc+tcp://127.0.0.1:$port" "$RECORDS" "$per_batch" ;;
        py-unix) "$PY" bench/flight_perf_pyarrow.py "$method" "grpc+unix://$work/flight.sock" "$RECORDS" "$per_batch" ;;
        shm-sealed) "$bin" bench flight -transport shm -num_streams 1 -num_threads 1 --shared "${flags[@]}" \
             -records_per_stream "$RECORDS" -records_per_batch "$per_batch" "${put_flag[@]}" --json ;;
        *) "$bin" bench flight -transport "$plane" -num_streams 1 -num_threads 1 "${flags[@]}" \
             -records_per_stream "$RECORDS" -records_per_batch "$per_batch" "${put_flag[@]}" --json ;;
      esac
    }
    # Every plane once per round, so that drift of this shared machine hits all alike.
    for _ in $(seq "$RUNS"); do
      for name in "${names[@]}"; do
        out=$(one "$name")
        mbs[$name]+="$(echo "$out" | field "['mb_per_s']") "
        lat[$name]+="$(echo "$out" | field "['latency_us']['p50']") "
      done
    done
    for name in "${names[@]}"; do
      mbs[$name]=$(printf '%s\n' ${mbs[$name]} | median)
      lat[$name]=$(printf '%s\n' ${lat[$name]} | median)
    done
    label="$((per_batch * 32 / 1024))KiB"
    for name in "${names[@]}"; do
      case ${name%@before} in
        grpc|tcp|ucx) base=py-tcp ;;
        shm|shm-sealed) base=py-unix ;;
        *) base="" ;;
      esac
      ratio=""
      if [ -n "$base" ]; then
        ratio=$(awk -v a="${mbs[$name]}" -v b="${mbs[$base]}" -v la="${lat[$name]}" -v lb="${lat[$base]}" \
          'BEGIN {printf "%.2fx %s, latency %.2gx", a / b, "'"$base"'", la / lb}')
      fi
      if [ -n "$BEFORE" ] && [ -n "$base" ] && [ "$name" = "${name%@before}" ]; then
        ratio+=$(awk -v a="${mbs[$name]}" -v b="${mbs[$name@before]}" 'BEGIN {printf "; %.2fx before", a / b}')
      fi
      printf '%-6s %-8s %-17s %10.0f %12.1f   %s\n' "$method" "$label" "$name" "${mbs[$name]}" "${lat[$name]}" "$ratio"
    done
    unset mbs lat
  done
done

# Load: CLIENTS x GETS DoGets of one TABLE_MB table at once on every plane, against one client
# alone; the server's peak and idle RSS (bench/flight_load.py).
if [ "${LOAD:-1}" != 0 ]; then
  echo
  METRICS=${#metrics[@]} "$PY" bench/flight_load.py "$WS"
fi
