"""wirespeed/flight.hpp, the C++ package over the C library, built against the Arrow C++ that
pyarrow's wheel ships (no Arrow build): a C++ program reads `serve` over a data plane and
over gRPC with arrow::flight::FlightClient, and a C++ service is read by pyarrow over gRPC
and by wirespeed.flight over shared memory."""

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.flight as paflight
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from wirespeed_proc import BIN, ROOT, WirespeedProc  # noqa: E402

from wirespeed import flight  # noqa: E402

KEY = "a key for the C++ tests"
LIB = BIN.parent  # libwirespeed_c.so, built beside the binary
SOURCE = ROOT / "crates" / "wirespeed-c" / "tests" / "cpp" / "flight_test.cpp"

def arrow_library(name):
    """The versioned file of one of pyarrow's Arrow C++ libraries (libarrow.so.2600, ...)."""
    found = sorted(Path(pa.get_library_dirs()[0]).glob(f"lib{name}.so.*"), key=lambda p: len(p.name))
    assert found, f"pyarrow ships no lib{name}"
    return found[0]


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    exe = tmp_path_factory.mktemp("cpp") / "flight_test"
    arrow_dir = pa.get_library_dirs()[0]
    command = [
        "g++", "-std=c++20", "-O1", "-g", "-Wall", "-Werror",
        f"-I{pa.get_include()}", f"-I{ROOT / 'crates' / 'wirespeed-c' / 'include'}",
        str(SOURCE), "-o", str(exe),
        str(arrow_library("arrow_flight")), str(arrow_library("arrow")),
        f"-L{LIB}", "-lwirespeed_c", f"-Wl,-rpath,{LIB}:{arrow_dir}",
    ]
    built = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-4000:]
    return exe


@pytest.fixture
def keyfile(tmp_path):
    path = tmp_path / "key"
    path.write_text(KEY + "\n")
    return path


class Served(WirespeedProc):
    key = KEY


def test_cpp_reads_serve_over_shm_and_the_same_over_arrow_flights_grpc_client(program, keyfile, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    rows = 300_000
    table = pa.table({"a": pa.array(range(rows), pa.int64()),
                      "s": pa.array([None if i % 7 == 0 else f"row {i}" for i in range(rows)])})
    feather.write_feather(table, data / "t.arrow", compression="uncompressed", chunksize=65536)
    server = Served(["serve", str(data), "--listen", "127.0.0.1:0"])
    try:
        out = subprocess.run([str(program), "read", server.url, str(keyfile), "t.arrow"],
                             capture_output=True, text=True, timeout=120)
    finally:
        server.stop()
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["plane", "shm", "rows", str(rows), "equal", "yes", "schema", "yes",
                                  "missing", "KeyError"], out.stdout


def test_a_cpp_service_is_read_by_pyarrow_over_grpc_and_by_wirespeed_flight_over_shm(program, keyfile):
    proc = subprocess.Popen([str(program), "serve", str(keyfile)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("port "), line
        url = f"grpc://127.0.0.1:{int(line.split()[1])}"
        descriptor = paflight.FlightDescriptor.for_path("cpp-table")

        theirs = paflight.connect(url)
        info = theirs.get_flight_info(descriptor)
        expected = theirs.do_get(info.endpoints[0].ticket).read_all()
        assert expected.num_rows == info.total_records == 100_000
        assert expected.column("n").to_pylist()[:3] == [0, 3, 6]

        ours = flight.connect(url, key=KEY.encode())
        reader = ours.do_get(ours.get_flight_info(descriptor).endpoints[0].ticket)
        assert reader.plane == "shm"
        assert reader.read_all().equals(expected)

        with pytest.raises(KeyError, match="no such ticket"):
            theirs.do_get(paflight.Ticket(b"other")).read_all()
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
