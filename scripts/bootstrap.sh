#!/usr/bin/env bash
# Installs what building, testing and benchmarking wirespeed needs on a bare Debian 12 machine.
# Idempotent: every step checks first, so a warm machine pays almost nothing.
set -euo pipefail

# libclang-dev: bindgen generates the UCX bindings (crates/ucx-sys) from the system headers.
# openssh-server: the tests start a throwaway sshd on 127.0.0.1 for remote copies; rsync and
# netcat are peers in bench/tools_compare.sh. iproute2: `ip netns` and `tc` make the hosts of
# tests/hosts.py; tcpdump captures what crosses their bridge. Open MPI: `fles run` under
# mpirun (the `mpi` crate builds against mpicc). g++, Boost.Serialization and Boost.Iostreams
# (zstd): the test that reads our .tsa files as FLESnet does.
# Boost's headers (Interprocess) and libzmq: FLESnet's shared-memory consumer interface, and
# the consumer that tests it.
# SimGrid: simulating timeslice building (crates/simgrid-sys binds its headers).
# InfluxDB and Prometheus (promtool): the live metrics of `fles run -m` go to the real ones.
# protoc and protobuf's own .proto files: the Flight descriptor that server reflection serves
# (scripts/flight_descriptor.sh; `make lint` checks it is current).
# Maven and a JDK: Apache Arrow's Java Flight client (flight-core) in the interop tests.
APT_PACKAGES=(maven openjdk-17-jdk-headless pkg-config openssl iperf3 ucx-utils libucx-dev libfabric-dev libfabric-bin libclang-dev openssh-server openssh-client rsync netcat-openbsd
  iproute2 tcpdump libopenmpi-dev openmpi-bin g++ libboost-serialization-dev libboost-iostreams-dev libboost-dev libzmq3-dev libsimgrid-dev
  influxdb prometheus protobuf-compiler libprotobuf-dev)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The toolchain pinned in rust-toolchain.toml; rustup installs it if it is missing.
if command -v rustup >/dev/null 2>&1; then
  rustup show active-toolchain >/dev/null
fi
command -v cargo >/dev/null || { echo "bootstrap: cargo not found; install rustup first" >&2; exit 1; }

# A Python venv with pyarrow: the foreign Flight client and server in the interop tests and
# the peer in bench/flight_compare.sh. Pinned, so every machine tests against the same pyarrow.
# maturin builds the Python package's wheel; mypy checks its type stubs; mpi4py (on the
# system's Open MPI) runs a timeslice builder from Python under mpirun; numpy takes frames by
# DLPack, as CuPy and PyTorch do on a GPU.
VENV="$(cd "$(dirname "$0")/.." && pwd)/.venv"
PY_PACKAGES=(maturin==1.16.0 -r "$(dirname "$VENV")/python/tests/requirements.txt")
if ! "$VENV/bin/python" -c "import pyarrow.flight, pytest, pytest_timeout, hypothesis, maturin, mypy, mpi4py, numpy, grpc_health.v1.health_pb2" >/dev/null 2>&1; then
  echo "bootstrap: creating $VENV with ${PY_PACKAGES[*]}"
  rm -rf "$VENV"
  if ! python3 -m venv "$VENV" >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
    rm -rf "$VENV"
    python3 -m venv "$VENV"
  fi
  "$VENV/bin/pip" install -q --disable-pip-version-check "${PY_PACKAGES[@]}"
fi

# Go builds arrow-go's Flight client for the interop tests. Without a Go of 1.21 or later (which
# fetches the version go.mod asks for itself), the Go client fetches one as a module.
GO_TOOLCHAIN=go1.26.1
TOOLS="$(cd "$(dirname "$0")/.." && pwd)/.tools"
go_ok() { command -v go >/dev/null 2>&1 && go version | grep -qE 'go1\.(2[1-9]|[3-9][0-9])'; }
if ! go_ok && [ ! -x "$TOOLS/go/bin/go" ]; then
  # Debian's Go (1.19) is too old to build the client, but its own client fetches the newer
  # toolchain by name, as a module from the Go module proxy.
  if ! command -v go >/dev/null 2>&1; then
    echo "bootstrap: installing golang-go"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends golang-go >/dev/null
  fi
  echo "bootstrap: fetching $GO_TOOLCHAIN through go mod download"
  module="golang.org/toolchain@v0.0.1-$GO_TOOLCHAIN.linux-amd64"
  dir=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "$module" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
  mkdir -p "$TOOLS"
  cp -r "$dir" "$TOOLS/go"
  chmod -R u+w "$TOOLS/go"
  chmod +x "$TOOLS/go/bin/"* "$TOOLS/go/pkg/tool/"*/*
fi

# grpcurl, the generic gRPC client operators use: the tests list and call serve through its
# reflection service. A Go module, installed by name.
if [ ! -x "$TOOLS/bin/grpcurl" ]; then
  echo "bootstrap: installing grpcurl"
  GO=go
  go_ok || GO="$TOOLS/go/bin/go"
  GOBIN="$TOOLS/bin" "$GO" install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4
fi

# java/ binds the C library with the FFM API, so `make languages` needs a JDK of 22 or later:
# these machines carry Temurin 25 under /usr/lib/jvm (Debian 12 packages none that new).
bash "$(dirname "$0")/jdk.sh" 22 >/dev/null || echo "bootstrap: make languages (in make test) will stop at java/" >&2
