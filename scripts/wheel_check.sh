#!/usr/bin/env bash
# Builds the Python package's wheel as users get it (maturin, abi3, manylinux_2_34: maturin's
# own auditwheel check refuses symbols newer than glibc 2.34 and any library outside the
# manylinux set) and checks what it holds.
#   scripts/wheel_check.sh           compiled as the tests are, then installed into a fresh venv,
#                                    target/wheel-venv, with the tests' requirements and nothing
#                                    of the checkout; from outside the checkout: imports, host
#                                    frames, and Arrow's example Flight programs, unchanged, with
#                                    wirespeed.flight in pyarrow.flight's place and a key at both
#                                    ends (the data must take the shm plane). `make python` then
#                                    runs the Python tests in that venv.
#   scripts/wheel_check.sh release   the wheel to ship, in target/wheels (`make wheel`)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
if [ "${1:-}" = release ]; then
  profile=(--release) out=target/wheels
else
  # maturin builds with `cargo rustc`, which turns `--profile test` into a test harness.
  profile=(--profile wheel-check) out=target/wheels-for-tests
fi
rm -rf "$out"
.venv/bin/maturin build --quiet --locked "${profile[@]}" --compatibility manylinux_2_34 \
  -m python/Cargo.toml -o "$out"
wheel=$(ls "$out"/wirespeed-*.whl)
case "$wheel" in
  *-cp311-abi3-manylinux_2_34_x86_64.whl) ;;
  *) echo "wheel_check: unexpected wheel name $wheel" >&2; exit 1 ;;
esac
# One native module, no bundled libraries: UCX, libfabric and CUDA are opened at run time.
contents=$(.venv/bin/python -c 'import sys, zipfile; print("\n".join(zipfile.ZipFile(sys.argv[1]).namelist()))' "$wheel")
for f in wirespeed/_native.abi3.so wirespeed/__init__.py wirespeed/flight.py wirespeed/fles.py wirespeed/py.typed \
  wirespeed/_native.pyi; do
  grep -qx "$f" <<<"$contents" || { echo "wheel_check: $f is not in $wheel" >&2; exit 1; }
done
if grep -E '\.so' <<<"$contents" | grep -vqx 'wirespeed/_native.abi3.so'; then
  echo "wheel_check: $wheel bundles libraries:" >&2; grep -E '\.so' <<<"$contents" >&2; exit 1
fi
echo "wheel_check: $(basename "$wheel") ($(du -h "$wheel" | cut -f1))"
[ "${1:-}" = release ] && exit 0

venv=$repo/target/wheel-venv
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "$wheel" -r python/tests/requirements.txt
py=$venv/bin/python
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
cd "$work"
"$py" - <<'PY'
import wirespeed, wirespeed.flight, wirespeed.fles, sysconfig
assert wirespeed.__file__.startswith(sysconfig.get_paths()["purelib"]), wirespeed.__file__
run = wirespeed.fles.build(2, 20, gpu="host", microslice_size=2000, timeslice_size=100)
checked = [f.check for f in run]
assert checked == [(2 * 101, 0)] * 20, checked
run.finish()
print("wheel_check: imports and host frames from", wirespeed.__file__)
PY
examples=$repo/python/tests/flight_examples
swap="import runpy, sys, swap_in_wirespeed; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export WIRESPEED_KEY=wheel-check-key-0123456789 PYTHONPATH=$repo/python/tests/pyarrow_suite PYTHONUNBUFFERED=1
"$py" -c "$swap" "$examples/server.py" "$port" >"$work/server.out" &
for _ in $(seq 100); do grep -q "Serving on" "$work/server.out" 2>/dev/null && break; sleep 0.1; done
report=$(timeout 120 "$py" -c "$swap" "$examples/client.py" "localhost:$port" | tail -1)
expected="[\"grpc+tcp://localhost:$port\", 10000, true, \"shm\"]"
"$py" -c 'import json, sys; r = json.loads(sys.argv[1]); assert r["read"] == [json.loads(sys.argv[2])], r' \
  "$report" "$expected"
echo "wheel_check: Arrow's example server and client, both on the installed wirespeed.flight, read over shm"
