#!/bin/bash
# The GPU checks and figures, in one call on a GPU machine (the `device` tool's, where nothing
# can be installed): build here with `bench/gpu_carry.sh`, which fills .device/ with a
# stripped release binary, the Python package and UCX built with CUDA (PyPI's libucx-cu13),
# then carry .device and run this there.
#   bench/gpu_device.sh [quick|rings]     logs and JSON under $OUT (default /tmp/gpu-out)
set -u
D=$PWD/.device
B=$D/wirespeed
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
export WIRESPEED_KEY=gpu-check-key-0123456789 PYTHONUNBUFFERED=1
# NVRTC compiles the CRC kernel at run time: find it wherever the CUDA toolkit keeps it.
nvrtc=$(ls /usr/local/cuda/lib64/libnvrtc.so* 2>/dev/null | head -1)
[ -n "$nvrtc" ] || nvrtc=$(find / -xdev -name 'libnvrtc.so*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$(dirname "${nvrtc:-/}"):${LD_LIBRARY_PATH:-}
echo "nvrtc: ${nvrtc:-none}"
nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv
echo "cores: $(nproc)"
python3 -c "import pyarrow, pyarrow.cuda; print('pyarrow.cuda', pyarrow.__version__)" 2>&1 | tail -1
step() { echo; echo "== $1 ($(date +%T))"; }
# UCX 1.22 built with CUDA, for the ucx runs (the binary loads libucp at run time).
U=/tmp/ucx
mkdir -p $U && tar -xJf "$D/ucx.tar.xz" -C $U
export PATH=$U/libucx/bin:$PATH UCXLIB=$U/libucx/lib

step "GPU memory lent for one-sided puts: shm by CUDA IPC (another process, this one), UCX as CUDA memory, tcp refused, forged descriptors"
LD_LIBRARY_PATH=$UCXLIB:$LD_LIBRARY_PATH timeout 120 "$D/gpu_regions" --test-threads=1 2>&1 | tail -12

step "GPU rings: 8 inputs put straight into GPU memory over shm (CUDA IPC), ucx (CUDA memory), and tcp (refused: host rings)"
for t in shm ucx tcp; do
  LD_LIBRARY_PATH=$UCXLIB:$LD_LIBRARY_PATH timeout 120 "$B" fles run --local 8:1 --transport $t --gpu 0 --gpu-rings \
    --timeslices 2000 --report "$OUT/rings_$t.json" 2>&1 | tail -1
  echo "rc=${PIPESTATUS[0]}"
done
if [ "${1:-}" = rings ]; then  # GPU rings against host rings over shm, turn by turn, two ring sizes
  for size in 8388608 33554432; do
    for round in 1 2; do
      timeout 120 "$B" bench gpu --transports shm --buffer-size $size --json "$OUT/rings_${size}_$round.json" | tail -8
    done
  done
  exit 0
fi

step "Python: frames handed to CuPy and PyTorch (DLPack, __cuda_array_interface__), host frames to numpy"
export PYTHONPATH=$D/site
timeout 240 python3 -m pytest -q -p no:cacheprovider --noconftest python/tests/test_gpu_frames.py \
  python/tests/test_fles_frames.py 2>&1 | tail -25

step "every CRC checked on the GPU: 8 inputs, 1 compute node (dfs); 4 inputs, 2 compute nodes sharing GPU 0 (rr)"
timeout 120 "$B" fles run --local 8:1 --gpu 0 --timeslices 4000 --report "$OUT/check_dfs.json" | tail -2
echo "rc=${PIPESTATUS[0]}"
timeout 120 "$B" fles run --local 4:2 --scheduler rr --gpu 0 --timeslices 2000 | tail -2
echo "rc=${PIPESTATUS[0]}"
python3 - "$OUT/check_dfs.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for c in r["computes"]:
    f = c["frames"]; m = f["gpu_memory"]
    print(f"compute {c['index']}: {f['built']} frames of {f['frame_bytes']} bytes, {f['microslices_checked']} microslices checked on {f['device']}; "
          f"free GPU memory before {m['free_before']} bytes, after {m['free_after']} ({(m['free_before'] - m['free_after']) >> 10} KiB less)")
PY

step "a wrong byte planted in input 0's component of timeslice 123 is found"
timeout 60 "$B" fles run --local 2:1 --gpu 0 --timeslices 500 --corrupt 123 >/dev/null 2>"$OUT/corrupt.txt"
echo "rc=$? (must not be 0): $(head -1 "$OUT/corrupt.txt")"

step "GPU errors: a device that is not there, frames larger than the GPU (each: one line, non-zero, nothing left hanging)"
timeout 60 "$B" fles run --local 2:1 --gpu 64 --timeslices 100 2>&1 | tail -2
echo "rc=${PIPESTATUS[0]}"
timeout 60 "$B" fles run --local 2:1 --gpu 0 --frame-bytes 1099511627776 --timeslices 100 2>&1 | tail -2
echo "rc=${PIPESTATUS[0]}"
[ "${1:-}" = quick ] && exit 0

step "bench gpu: the limits, then 1 to 8 inputs over shm, tcp and ucx, rings in host memory and in GPU memory"
LD_LIBRARY_PATH=$UCXLIB:$LD_LIBRARY_PATH timeout 420 "$B" bench gpu --transports shm,tcp,ucx --json "$OUT/bench_gpu.json"

step "what one input's copy and 8 inputs' copies can do: memcpy out of cache (32 MiB), 1 core and 8 at once"
"$B" bench memcpy --size 33554432 --total 20000000000
for i in 1 2 3 4 5 6 7 8; do "$B" bench memcpy --size 33554432 --total 10000000000 --json & done >"$OUT/memcpy8.txt"
wait
python3 -c "import json,sys; r=[json.loads(l)['mb_per_s'] for l in open(sys.argv[1])]; print(f'8 cores at once: {sum(r)/1e3:.2f} GB/s together ({min(r)/1e3:.2f} to {max(r)/1e3:.2f} each)')" "$OUT/memcpy8.txt"

step "no collapse: the same total rate, 6 GB/s, from 1 input and from 8 (replayed components of about 1 MiB)"
rp=/tmp/gpu-replay.tsa
"$B" fles run --local 1:1 --timeslice-size 1600 --timeslices 64 --output tsa:$rp >/dev/null
one() { timeout 60 "$B" fles run --timeslice-size 1600 --replay $rp --gpu 0 "$@" | head -1; }
echo -n "1 input at 6 GB/s: "; one --local 1:1 --timeslices 4000 --rate 6
echo -n "8 inputs at 0.75 GB/s: "; one --local 8:1 --timeslices 500 --rate 0.75

step "UCX 1.22 with CUDA (libucx-cu13): its transports, and ucx_perftest putting into GPU memory"
(LD_LIBRARY_PATH=$U/libucx/lib:$LD_LIBRARY_PATH ucx_info -v | head -3; LD_LIBRARY_PATH=$U/libucx/lib:$LD_LIBRARY_PATH ucx_info -d | grep -E "Transport|Memory domain|memory types" | sort | uniq -c | head -30) 2>&1
for mem in host cuda; do
  for tls in "tcp,cuda_copy" "cuda_copy,cuda_ipc,sm"; do
    echo -n "ucx_perftest ucp_put_bw 1 MiB into $mem memory, UCX_TLS=$tls: "
    (export LD_LIBRARY_PATH=$U/libucx/lib:$LD_LIBRARY_PATH UCX_TLS=$tls
     timeout 30 ucx_perftest -p 13337 >/dev/null 2>&1 &
     sleep 1
     timeout 25 ucx_perftest 127.0.0.1 -p 13337 -t ucp_put_bw -m host,$mem -s 1048576 -n 2000 -w 200 2>&1 | tail -1; wait)
  done
done
echo -n "wirespeed bench raw over UCX 1.22 (the ABI check), 1 MiB: "
LD_LIBRARY_PATH=$U/libucx/lib:$LD_LIBRARY_PATH UCX_TLS=sm,self timeout 60 "$B" bench raw --transport ucx --size 1048576 --count 5000 2>&1 | grep -E "Speed|rror"
