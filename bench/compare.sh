#!/usr/bin/env bash
# wirespeed against its peers, in one run on this machine, at the same sizes:
#   tcp  vs iperf3 (one stream, loopback)
#   shm  vs ucx_perftest -t ucp_am_bw with UCX_TLS=posix,cma,self
#   ucx  vs ucx_perftest -t ucp_am_bw with the same UCX_TLS (tcp, and posix,cma,self), sending
#        from memory allocated as perftest's is (bench raw --ucx-body), and from memory we wrote
#   ucx  with 64 streams vs 1 stream on one connection
#   ucx  put and get (one-sided) vs ucx_perftest -t ucp_put_bw and -t ucp_get
#   ofi+shm and ofi+tcp streaming 1 MiB, and ping-pong at 64 B, vs fi_pingpong over shm and
#        tcp;ofi_rxm; ofi+shm with 64 streams vs 1 stream
#   ucx  ping-pong at 64 B vs ucx_perftest -t tag_lat
#   and a single-core memcpy figure as the ceiling for one-copy transports.
# Every figure is the median of RUNS runs (default 3), ours taking turns with the peer's so
# that drift of this shared machine hits both alike; MB = 10^6 bytes. Both sides leave the
# first WARMUP messages (default 10,000, ucx_perftest's own default) out of their figures.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/wirespeed}
RUNS=${RUNS:-3}
PORT=${PORT:-5301}
WARMUP=${WARMUP:-10000}

median() { python3 -c 'import sys,statistics; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

ws() { # transport size [streams [flags...]] -> MB/s
  "$BIN" bench raw --transport "$1" --size "$2" --streams "${3:-1}" --warmup "$WARMUP" "${@:4}" --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["mb_per_s"])'
}

ws_msgs() { # transport size -> messages/s
  "$BIN" bench raw --transport "$1" --size "$2" --warmup "$WARMUP" --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["msgs_per_s"])'
}

iperf() { # -> MB/s, one TCP stream on loopback for 5 s
  iperf3 -s -1 -p "$PORT" >/dev/null 2>&1 &
  local srv=$!
  sleep 0.3
  iperf3 -c 127.0.0.1 -p "$PORT" -t 5 -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8e6)'
  wait "$srv" 2>/dev/null || true
}

ucx_perf() { # test size [tls] -> MB/s (ucx_perftest reports MiB/s; converted)
  local test=$1 size=$2 tls=${3:-posix,cma,self} n=$(( 16000000000 / $2 ))   # the volume `bench raw` moves
  [ "$n" -gt 2000000 ] && n=2000000
  UCX_TLS=$tls ucx_perftest -t "$test" -s "$size" -n "$n" -w "$WARMUP" -p "$PORT" >/dev/null 2>&1 &
  local srv=$!
  sleep 0.5
  UCX_TLS=$tls ucx_perftest 127.0.0.1 -t "$test" -s "$size" -n "$n" -w "$WARMUP" -p "$PORT" 2>/dev/null |
    awk '/Final:/ { print $(NF-2) * 1.048576 }'
  wait "$srv" 2>/dev/null || true
}
ucx_am_bw() { ucx_perf ucp_am_bw "$@"; }

ws_rma() { # op size -> MB/s, ucx over posix,cma,self
  UCX_TLS=posix,cma,self "$BIN" bench raw --transport ucx --op "$1" --size "$2" --warmup "$WARMUP" --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["mb_per_s"])'
}

ws_lat() { # transport size -> mean one-way latency in us (half of each round trip)
  "$BIN" bench raw --transport "$1" --op pingpong --size "$2" --count "${3:-100000}" --warmup 1000 --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["latency_us"]["mean"])'
}

fi_pp() { # provider size iterations column -> fi_pingpong's MB/sec (column 6) or usec/xfer (7)
  fi_pingpong -p "$1" -e rdm -S "$2" -I "$3" >/dev/null 2>&1 &
  local srv=$!
  sleep 0.5
  fi_pingpong -p "$1" -e rdm -S "$2" -I "$3" 127.0.0.1 2>/dev/null | awk -v c="$4" 'NF == 8 && $1 != "bytes" { print $c }'
  wait "$srv" 2>/dev/null || true
}

ucx_lat() { # size tls -> ucx_perftest tag_lat's overall average latency in us
  UCX_TLS=$2 ucx_perftest -t tag_lat -s "$1" -n 100000 -p "$PORT" >/dev/null 2>&1 &
  local srv=$!
  sleep 0.5
  UCX_TLS=$2 ucx_perftest 127.0.0.1 -t tag_lat -s "$1" -n 100000 -p "$PORT" 2>/dev/null | awk '/Final:/ { print $5 }'
  wait "$srv" 2>/dev/null || true
}

memcpy_1m() { # -> MB/s of one core copying 1 MiB blocks
  "$BIN" bench memcpy --size 1048576 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["mb_per_s"])'
}

ws_ucx() { # tls size [streams [flags...]] -> MB/s
  UCX_TLS=$1 ws ucx "$2" "${3:-1}" "${@:4}"
}

runs() { local out=(); for _ in $(seq "$RUNS"); do out+=("$("$@")"); done; median "${out[@]}"; }
# The peer's command and ours, taking turns RUNS times so that drift of this shared machine hits
# both alike; sets $peer and $mine to the medians. Each argument is one command line.
# With a third command, its median goes to $mine2.
pair() {
  local p=() m=() m2=()
  for _ in $(seq "$RUNS"); do
    p+=("$(eval "$1")"); m+=("$(eval "$2")")
    [ -n "${3:-}" ] && m2+=("$(eval "$3")")
  done
  peer=$(median "${p[@]}"); mine=$(median "${m[@]}")
  [ -n "${3:-}" ] && mine2=$(median "${m2[@]}")
  return 0
}
ratio() { python3 -c "print(f'{$1/$2:.2f}')"; }

printf '%-44s %12s %12s %8s\n' "case" "wirespeed" "peer" "ratio"
line() { printf '%-44s %12.0f %12.0f %8s\n' "$1" "$2" "$3" "$(ratio "$2" "$3")"; }

pair "iperf" "ws tcp 1048576"
line "tcp 1 MiB vs iperf3 (MB/s)" "$mine" "$peer"
for size in 131072 1048576; do
  pair "ucx_am_bw $size" "ws shm $size"
  line "shm $((size >> 10)) KiB vs ucx am_bw posix,cma (MB/s)" "$mine" "$peer"
done
pair "ucx_am_bw 4096" "ws shm 4096"
line "shm 4 KiB vs ucx am_bw posix,cma (MB/s)" "$mine" "$peer"
mine=$(runs ws_msgs shm 4096)
printf '%-44s %12.0f %12s %8s\n' "shm 4 KiB (messages/s, target 1e6)" "$mine" "-" "$(ratio "$mine" 1000000)"
# Like for like, our body lives where perftest's does: memory UCX allocated and nobody wrote
# (with tcp it reads as the kernel's zero page). The second line sends a body we wrote.
for tls in tcp posix,cma,self; do
  for size in 131072 1048576; do
    pair "ucx_am_bw $size $tls" "ws_ucx $tls $size 1 --ucx-body" "ws_ucx $tls $size"
    line "ucx $((size >> 10)) KiB vs ucx am_bw, UCX_TLS=$tls (MB/s)" "$mine" "$peer"
    line "  the same, with a body we wrote" "$mine2" "$peer"
  done
done
pair "ws_ucx posix,cma,self 1048576 1" "ws_ucx posix,cma,self 1048576 64"
line "ucx 1 MiB, 64 streams vs 1 stream (MB/s)" "$mine" "$peer"
pair "ucx_perf ucp_put_bw 1048576" "ws_rma put 1048576"
line "ucx put 1 MiB vs ucp_put_bw, posix,cma (MB/s)" "$mine" "$peer"
pair "ucx_perf ucp_get 1048576" "ws_rma get 1048576"
line "ucx get 1 MiB vs ucp_get, posix,cma (MB/s)" "$mine" "$peer"
pair "memcpy_1m" "ws shm 1048576"
line "shm 1 MiB vs one-core memcpy 1 MiB (MB/s)" "$mine" "$peer"
pair "fi_pp shm 1048576 5000 6" "ws ofi+shm 1048576"
line "ofi+shm 1 MiB vs fi_pingpong shm (MB/s)" "$mine" "$peer"
pair "fi_pp 'tcp;ofi_rxm' 1048576 2000 6" "ws ofi+tcp 1048576"
line "ofi+tcp 1 MiB vs fi_pingpong tcp;ofi_rxm (MB/s)" "$mine" "$peer"
pair "ws ofi+shm 1048576 1" "ws ofi+shm 1048576 64"
line "ofi+shm 1 MiB, 64 streams vs 1 stream (MB/s)" "$mine" "$peer"
# Latencies: lower is better, so a ratio under 1 means we are faster.
lat() { printf '%-44s %12.2f %12.2f %8s\n' "$1" "$2" "$3" "$(ratio "$2" "$3")"; }
pair "fi_pp shm 64 100000 7" "ws_lat ofi+shm 64"
lat "ofi+shm 64 B ping-pong vs fi_pingpong (us)" "$mine" "$peer"
pair "fi_pp 'tcp;ofi_rxm' 64 20000 7" "ws_lat ofi+tcp 64 20000"
lat "ofi+tcp 64 B ping-pong vs fi_pingpong (us)" "$mine" "$peer"
pair "ucx_lat 64 posix,cma,self" "UCX_TLS=posix,cma,self ws_lat ucx 64"
lat "ucx 64 B ping-pong vs tag_lat posix,cma (us)" "$mine" "$peer"
