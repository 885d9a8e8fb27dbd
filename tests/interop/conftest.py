"""Fixtures for the Flight interop tests: the real `wirespeed` binary and pyarrow.flight."""
import hashlib
import hmac
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from wirespeed_proc import BIN, ROOT, WirespeedProc, free_port  # noqa: E402, F401

KEY = "interop test key, 0123456789"


def table(rows=50_000, seed=0):
    return pa.table({
        "a": pa.array(range(seed, seed + rows), pa.int64()),
        "s": pa.array([None if i % 11 == 0 else f"row {i}" for i in range(rows)]),
        "d": pa.array(["red", "green", "blue"] * (rows // 3) + ["red"] * (rows % 3)).dictionary_encode(),
    })


class Proc(WirespeedProc):
    key = KEY


@pytest.fixture
def served(tmp_path):
    """`wirespeed serve` over a directory of Arrow and Parquet files."""
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    files = {
        "plain.arrow": table(seed=1),
        "lz4.feather": table(seed=2),
        "sub/t.parquet": table(seed=3),
    }
    feather.write_feather(files["plain.arrow"], data / "plain.arrow", compression="uncompressed")
    feather.write_feather(files["lz4.feather"], data / "lz4.feather", compression="lz4")
    pq.write_table(files["sub/t.parquet"], data / "sub" / "t.parquet")
    port = free_port()
    proc = Proc(["serve", str(data), "--listen", f"127.0.0.1:{port}"])
    proc.dir, proc.files = data, files
    yield proc
    proc.stop()


@pytest.fixture
def perf_server():
    """`wirespeed bench flight-server`: echoes exchanges, counts uploads."""
    proc = Proc(["bench", "flight-server", "--listen", "127.0.0.1:0"])
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def goflight():
    """Arrow's Go Flight client as tests/interop/goflight drives it (arrow-go, from the module proxy)."""
    out = ROOT / "target" / "goflight"
    subprocess.run(["go", "build", "-mod=readonly", "-o", str(out), "."], cwd=ROOT / "tests" / "interop" / "goflight",
                   check=True, timeout=600, env={**os.environ, "CGO_ENABLED": "0"})
    return out


def run(*args, env=None, timeout=120):
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "WIRESPEED_KEY": KEY, **(env or {})})


def python():
    return sys.executable


def hello(key=KEY):
    """The header with which a client holding `key` asks a server for its data planes
    (docs/PROTOCOL.md, "Hello")."""
    nonce = os.urandom(16)
    tag = hmac.new(key.encode(), b"wirespeed-flight hello v1" + nonce, hashlib.sha256).hexdigest()
    return (b"x-wirespeed-hello", f"v1.{nonce.hex()}.{tag}".encode())
