#!/bin/bash
# Fills .device/ (ignored by git) with what bench/gpu_device.sh needs on a GPU machine that
# can install nothing: the release binary without MPI, stripped; the GPU regions' test; the
# Python package with its native module in release; and UCX built with CUDA, from PyPI's
# libucx-cu13 wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo /.device/ >>.git/info/exclude
mkdir -p .device/site/wirespeed
cargo build --locked --release -p wirespeed-cli --no-default-features
strip -o .device/wirespeed target/release/wirespeed
# The GPU regions' own test (shm by CUDA IPC, UCX as CUDA memory), run there as it is.
test_bin=$(cargo test --locked --release -p wirespeed --features gpu --test gpu_regions --no-run --message-format=json \
  | python3 -c 'import json,sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable")][-1])')
strip -o .device/gpu_regions "$test_bin"
cargo build --locked --release -p wirespeed-python
cp python/wirespeed/*.py python/wirespeed/py.typed .device/site/wirespeed/
strip -o .device/site/wirespeed/_native.abi3.so target/release/lib_native.so
if [ ! -f .device/ucx.tar.xz ]; then
  tmp=$(mktemp -d)
  .venv/bin/pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 -d "$tmp" libucx-cu13==1.22.0
  (cd "$tmp" && unzip -q libucx_cu13-*.whl 'libucx/lib/lib*.so.0*' 'libucx/lib/ucx/*.so.0*' \
    'libucx/bin/ucx_info' 'libucx/bin/ucx_perftest' 'libucx_cu13.libs/*' \
    && rm libucx/lib/*.so.0.0.0 libucx/lib/ucx/*.so.0.0.0 2>/dev/null; true)
  tar -cJf .device/ucx.tar.xz -C "$tmp" libucx libucx_cu13.libs
  rm -rf "$tmp"
fi
du -sh .device/*
