#!/usr/bin/env bash
# The tools between two hosts with links of a known speed, against iperf3's single stream in the
# same namespaces and the same rounds. The hosts are network namespaces on one bridge
# (tests/hosts.py), each link capped both ways with tc's token bucket at each of RATES (default
# "1gbit none": 1 Gbit/s, and uncapped, the fastest these CPUs carry through a bridge):
#   send/recv   a SIZE file (default 1 GiB) from A to /dev/null on B, over tcp, ucx and ofi+tcp
#   cp          the same file over ssh to B's /dev/null
#   get         a flight of SIZE from `serve` on B to A's /dev/null
#   fles run    one input on A, one compute node on B (mpirun over ssh), over tcp
# These discard what they receive, as iperf3 does, so that the rows compare transports. Three
# more land in a file: cp-tcp-shm and get-tcp-shm into /dev/shm, beside write-shm, the same
# bytes copied into /dev/shm on one host (the ceiling of any transfer landing there).
# The providers' own tools run as peers too: ucx_perftest (ucp_am_bw over UCX_TLS=tcp) beside
# ucx, fi_pingpong (tcp;ofi_rxm) beside ofi+tcp.
# Env: CASES (some of the cases below, iperf3 among them), BIN, RUNS (3, in rounds: every case
# once, then again), SIZE, RATES, MTU (the bridge's and links' MTU: 9000 for jumbo frames), PY (a
# python with pyarrow, for the flight's file).
# MB = 10^6 bytes; medians; "÷ iperf3" is ours over iperf3's median at that rate.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${BIN:-target/release/wirespeed}")
RUNS=${RUNS:-3}
SIZE=${SIZE:-1073741824}
RATES=${RATES:-1gbit none}
MTU=${MTU:-1500}
PY=${PY:-.venv/bin/python}
WORK=$(mktemp -d /dev/shm/wirespeed-hosts.XXXXXX)
state=$(python3 tests/hosts.py up 2 --mtu "$MTU" --owner $$)
field() { python3 -c 'import json, sys; print(eval("s" + sys.argv[2], {"s": json.loads(sys.argv[1])}))' "$state" "$1"; }
DIR=$(field '["dir"]')
cleanup() {
  python3 tests/hosts.py down "$DIR" || true
  rm -rf "$WORK"
}
trap cleanup EXIT
NS_A=$(field '["hosts"][0]["ns"]') NS_B=$(field '["hosts"][1]["ns"]')
ADDR_B=$(field '["hosts"][1]["addr"]')
SSH="ssh $(python3 -c 'import json, sys; print(" ".join(json.loads(sys.argv[1])["ssh"]))' "$state")"
on() { local ns=$1; shift; ip netns exec "$ns" "$@"; }
export WIRESPEED_KEY=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
now() { date +%s.%N; }
mbs() { python3 -c "import sys; print(round(int(sys.argv[1]) / (float(sys.argv[3]) - float(sys.argv[2])) / 1e6))" "$SIZE" "$@"; }
median() { python3 -c 'import sys, statistics; print(round(statistics.median(float(x) for x in sys.argv[1:])))' "$@"; }

head -c "$SIZE" /dev/urandom >"$WORK/big"
mkdir "$WORK/data"
"$PY" - "$WORK/data/big.arrow" "$SIZE" <<'PY'
import sys
import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
rows = int(sys.argv[2]) // 32
t = pa.table({c: pa.array(np.arange(rows, dtype=np.int64)) for c in "abcd"})
feather.write_feather(t, sys.argv[1], compression="uncompressed", chunksize=4096)
PY
port=7470
on "$NS_B" "$BIN" serve "$WORK/data" --listen 0.0.0.0:8815 --planes ucx,tcp,ofi+tcp --log-format none >"$WORK/serve.log" 2>&1 &
for _ in $(seq 100); do grep -q serving "$WORK/serve.log" && break; sleep 0.1; done

iperf() {
  on "$NS_B" iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
  sleep 0.3
  on "$NS_A" iperf3 -c "$ADDR_B" -p 5201 -t 4 -J |
    python3 -c 'import json, sys; print(round(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 8e6))'
  wait
}
send() { # transport
  port=$((port + 1))
  on "$NS_B" "$BIN" recv --transport "$1" --listen "$ADDR_B:$port" >/dev/null 2>"$WORK/recv.log" &
  for _ in $(seq 100); do grep -q listening "$WORK/recv.log" && break; sleep 0.05; done
  local t0; t0=$(now)
  on "$NS_A" "$BIN" send --transport "$1" "$ADDR_B:$port" "$WORK/big" || return 1
  wait
  mbs "$t0" "$(now)"
}
copy() { # transport, destination on B
  rm -f "$WORK/copy"
  local t0; t0=$(now)
  on "$NS_A" "$BIN" cp -e "$SSH" --remote-bin "$BIN" --transport "$1" "$WORK/big" "$ADDR_B:$2" >/dev/null || return 1
  mbs "$t0" "$(now)"
}
fetch() { # transport, destination on A
  rm -f "$WORK/got.arrow"
  local t0; t0=$(now)
  on "$NS_A" "$BIN" get --transport "$1" "grpc://$ADDR_B:8815" big.arrow -o "$2" || return 1
  mbs "$t0" "$(now)"
}
write_shm() {
  rm -f "$WORK/copy"
  local t0; t0=$(now)
  dd if="$WORK/big" of="$WORK/copy" bs=1M status=none || return 1
  mbs "$t0" "$(now)"
}
peer_tool() { # a provider's test tool and its arguments: the server on B, then the client on A against B
  on "$NS_B" "$@" >/dev/null 2>&1 &
  sleep 0.5
  on "$NS_A" "$@" "$ADDR_B" 2>/dev/null || return 1
  wait
}
MIB=1048576
ucx_perf() { # UCX's own streaming test over its tcp transport, 1 MiB messages, SIZE in all
  # ucx_perftest reports MiB/s.
  peer_tool env UCX_TLS=tcp ucx_perftest -t ucp_am_bw -s $MIB -n $((SIZE / MIB)) -w 64 -p 5301 |
    awk '/Final:/ { printf "%d\n", $(NF-2) * 1.048576 }'
}
fi_pp() { # libfabric's fi_pingpong over tcp;ofi_rxm, 1 MiB: a ping-pong, so a floor of the provider's rate
  peer_tool fi_pingpong -p 'tcp;ofi_rxm' -e rdm -S $MIB -I $((SIZE / MIB)) |
    awk 'NF == 8 && $1 != "bytes" { printf "%d\n", $6 }'
}
fles() { # the aggregate of one input on A feeding one compute node on B, in MB/s
  on "$NS_A" mpirun --allow-run-as-root --host "$NS_A:1,$NS_B:1" -np 2 --bind-to none \
    --mca plm_rsh_agent "$SSH" --mca oob_tcp_if_include "$(field '["subnet"]')" \
    --mca btl_tcp_if_include "$(field '["subnet"]')" --mca btl self,tcp -x WIRESPEED_KEY \
    "$BIN" fles run --inputs 1 --transport tcp --timeslices 2000 --timeslice-size 100 \
    --microslice-size 4096 --report "$WORK/fles.json" >/dev/null 2>&1 || return 1
  python3 -c 'import json, sys; print(round(json.load(open(sys.argv[1]))["aggregate_gbps"] * 1000))' "$WORK/fles.json"
}

cases=(${CASES:-iperf3 ucx_perftest fi_pingpong send-tcp send-ucx send-ofi+tcp cp-tcp cp-ucx
  get-tcp get-ucx get-ofi+tcp fles-tcp write-shm cp-tcp-shm get-tcp-shm})
declare -A got
for rate in $RATES; do
  python3 tests/hosts.py rate "$DIR" 0 "$rate"
  python3 tests/hosts.py rate "$DIR" 1 "$rate"
  for r in $(seq "$RUNS"); do
    for c in "${cases[@]}"; do
      case $c in
        iperf3) v=$(iperf) ;;
        ucx_perftest) v=$(ucx_perf) ;;
        fi_pingpong) v=$(fi_pp) ;;
        send-*) v=$(send "${c#send-}") ;;
        write-shm) v=$(write_shm) ;;
        cp-tcp-shm) v=$(copy tcp "$WORK/copy") ;;
        get-tcp-shm) v=$(fetch tcp "$WORK/got.arrow") ;;
        cp-*) v=$(copy "${c#cp-}" /dev/null) ;;
        get-*) v=$(fetch "${c#get-}" /dev/null) ;;
        fles-tcp) v=$(fles) ;;
      esac || { echo "$c at $rate failed" >&2; exit 1; }
      got[$rate-$c]+=" $v"
    done
    echo "rate $rate: round $r of $RUNS done" >&2
  done
done

echo "MTU $MTU; $SIZE bytes a transfer; MB/s, medians of $RUNS in rounds"
printf '%-8s %-14s %10s %10s\n' rate case "MB/s" "÷ iperf3"
for rate in $RATES; do
  peer=$(median ${got[$rate-iperf3]})
  for c in "${cases[@]}"; do
    m=$(median ${got[$rate-$c]})
    printf '%-8s %-14s %10s %10s\n' "$rate" "$c" "$m" "$(python3 -c "print(f'{$m / $peer:.2f}')")"
  done
done
