#!/usr/bin/env bash
# Puts the Python package into the repository's venv for its tests: the native module built
# with the test profile (sharing everything `cargo test` built, where a wheel build would build
# it all again in release), and a .pth file that makes python/ importable. Users install with
# `pip install ./python`, which builds the wheel with maturin.
# With `release`, the release build (for benchmarks).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = release ]; then
  # The workspace as `make build` resolves it, so nothing is built twice.
  cargo build --locked --release
  cp target/release/lib_native.so python/wirespeed/_native.abi3.so
else
  # The workspace as `cargo test` resolves it, so nothing is built twice.
  cargo build --locked --profile test --workspace --lib --bins --tests
  cp target/debug/lib_native.so python/wirespeed/_native.abi3.so
fi
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$PWD/python" >"$site/wirespeed.pth"
