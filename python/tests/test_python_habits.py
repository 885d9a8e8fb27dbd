"""Blocking calls give way to Ctrl-C, memory goes back once Python drops what it read, and
the stubs match the module."""

import gc
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.flight as pf
import pytest

from wirespeed import flight
from conftest import KEY, table

STALLED_READ = f"""
import os, signal, threading, time
import pyarrow as pa
from wirespeed import flight

class Stalls(flight.FlightServerBase):
    def list_actions(self, context):
        return []

    def do_get(self, context, ticket):
        schema = pa.schema([("a", pa.int64())])
        def batches():
            yield pa.record_batch([pa.array([1])], schema=schema)
            time.sleep(3600)  # a producer that never sends the rest
        return flight.GeneratorStream(schema, batches())

server = Stalls("grpc://127.0.0.1:0", key={KEY!r})
reader = flight.connect(server.location, key={KEY!r}, transport=TRANSPORT).do_get(flight.Ticket(b"x"))
threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
start = time.time()
try:
    reader.read_all()
except KeyboardInterrupt:
    print(f"interrupted after {{time.time() - start:.1f}} s", flush=True)
    try:
        reader.read_all()  # what was read is gone: the rest alone must not pass for the table
    except flight.FlightError:
        os._exit(0)
os._exit(1)
"""


STALLED_ITERATION = STALLED_READ.split("threading.Timer")[0] + """
chunks = iter(reader)
assert next(chunks).data.num_rows == 1
threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
start = time.time()
try:
    next(chunks)
except KeyboardInterrupt:
    print(f"interrupted after {time.time() - start:.1f} s", flush=True)
    os._exit(0)
os._exit(1)
"""


# On gRPC the reader is pyarrow's own, which takes Ctrl-C between batches only, as pyarrow does.
@pytest.mark.parametrize("transport", ["shm", "tcp"])
@pytest.mark.parametrize("script", [STALLED_READ, STALLED_ITERATION], ids=["read_all", "iteration"])
def test_ctrl_c_interrupts_a_blocking_read(transport, script):
    script = script.replace("TRANSPORT", repr(transport))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    seconds = float(done.stdout.split()[2])
    assert seconds < 5, done.stdout


def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_memory_is_released_after_tables_are_dropped(py_server, transport):
    big = table(1_000_000)  # about 20 MiB
    py_server.tables[b"big"] = big
    client = flight.connect(py_server.location, key=KEY, transport=transport)
    client.do_get(pf.Ticket(b"big")).read_all()
    gc.collect()
    start = rss_mib()
    for _ in range(15):
        got = client.do_get(pf.Ticket(b"big")).read_all()
        assert got.num_rows == big.num_rows
        del got
        gc.collect()
    grown = rss_mib() - start
    assert grown < 4 * big.nbytes / 2**20, f"RSS grew {grown:.0f} MiB over 15 reads of {big.nbytes >> 20} MiB"


CONFIG = str(Path(__file__).resolve().parents[1] / "pyproject.toml")


@pytest.mark.parametrize("check", [["mypy.stubtest", "wirespeed._native", "--mypy-config-file", CONFIG],
                                   ["mypy", "--config-file", CONFIG, "-p", "wirespeed"]])
def test_the_stubs_match_the_module_and_the_package_type_checks(check, tmp_path):
    """mypy's stubtest (every name, signature and class in _native.pyi against the module),
    then mypy --strict over the package, as installed (run elsewhere than the checkout)."""
    done = subprocess.run([sys.executable, "-m", *check], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
