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

step "bench raw over shm, 1 MiB messages (the other limit)"
timeout 60 "$B" bench raw --transport shm --size 1048576 --count 20000

step "bench gpu: limit, then 1 to 8 inputs over shm and tcp"
timeout 300 "$B" bench gpu --json "$OUT/bench_gpu.json"

