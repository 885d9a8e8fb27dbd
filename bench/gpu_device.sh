#!/bin/bash
# The GPU checks and figures of timeslices built in GPU memory, in one call on a GPU machine
# (the `device` tool's, where nothing can be installed): carry a release binary built
# elsewhere (`cargo build --release -p wirespeed-cli --no-default-features`, stripped).
#   bench/gpu_device.sh [BINARY]     writes logs and JSON under $OUT (default /tmp/gpu-out)
set -u
B=${1:-.device/wirespeed}
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
export WIRESPEED_KEY=gpu-check-key-0123456789
# NVRTC compiles the CRC kernel at run time: find it wherever the CUDA toolkit keeps it.
nvrtc=$(ls /usr/local/cuda/lib64/libnvrtc.so* 2>/dev/null | head -1)
[ -n "$nvrtc" ] || nvrtc=$(find / -xdev -name 'libnvrtc.so*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$(dirname "${nvrtc:-/}"):${LD_LIBRARY_PATH:-}
echo "nvrtc: ${nvrtc:-none}"
nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv
nproc
step() { echo; echo "== $1"; }

step "every CRC checked on the GPU: 4 inputs, 1 compute node (dfs), then 2 sharing GPU 0 (rr)"
timeout 120 "$B" fles run --local 4:1 --gpu 0 --timeslices 4000 --report "$OUT/check_dfs.json"
echo "rc=$?"
timeout 120 "$B" fles run --local 4:2 --scheduler rr --gpu 0 --timeslices 4000 --report "$OUT/check_rr.json"
echo "rc=$?"
python3 - "$OUT/check_dfs.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for c in r["computes"]:
    f = c["frames"]; m = f["gpu_memory"]
    print(f"compute {c['index']}: {f['built']} frames of {f['frame_bytes']} bytes, {f['microslices_checked']} microslices checked on {f['device']}; "
          f"free GPU memory before {m['free_before']} bytes, after {m['free_after']} ({(m['free_before'] - m['free_after']) >> 10} KiB less)")
PY

step "a wrong byte planted in input 0's component of timeslice 123 is found"
timeout 60 "$B" fles run --local 2:1 --gpu 0 --timeslices 500 --corrupt 123
echo "rc=$? (must not be 0)"

step "bench gpu: the limits, then 1 to 8 inputs over shm and tcp"
timeout 300 "$B" bench gpu --json "$OUT/bench_gpu.json"


# What limits one input, and whether several collapse at the same total rate.
rp=/tmp/gpu-replay.tsa
"$B" fles run --local 1:1 --timeslice-size 1600 --timeslices 64 --output tsa:$rp >/dev/null
one() { timeout 60 "$B" fles run --timeslice-size 1600 --replay $rp --gpu 0 "$@" | head -1; }

step "one core's memcpy, in cache (1 MiB) and out of it (32 MiB): what one input's copy into its ring can do"
"$B" bench memcpy --size 1048576 --total 20000000000
"$B" bench memcpy --size 33554432 --total 20000000000

step "one input over shm to the GPU: data ring 8, 32 and 128 MiB (dfs), then rr"
for buf in 8388608 33554432 134217728; do echo -n "ring $buf: "; one --local 1:1 --timeslices 4000 --buffer-size $buf; done
echo -n "rr: "; one --local 1:1 --timeslices 4000 --scheduler rr

step "the same total rate, 6 GB/s, from 1 input and from 8"
echo -n "1 input at 6 GB/s: "; one --local 1:1 --timeslices 4000 --rate 6
echo -n "8 inputs at 0.75 GB/s: "; one --local 8:1 --timeslices 500 --rate 0.75
