#!/usr/bin/env bash
# Installs what building, testing and benchmarking wirespeed needs on a bare Debian 12 machine.
# Idempotent: every step checks first, so a warm machine pays almost nothing.
set -euo pipefail

# libclang-dev: bindgen generates the UCX bindings (crates/ucx-sys) from the system headers.
# openssh-server: the tests start a throwaway sshd on 127.0.0.1 for remote copies; rsync and
# netcat are peers in bench/tools_compare.sh.
APT_PACKAGES=(pkg-config iperf3 ucx-utils libucx-dev libclang-dev openssh-server openssh-client rsync netcat-openbsd)

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
