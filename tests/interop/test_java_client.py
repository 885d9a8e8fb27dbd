"""`wirespeed serve` with Apache Arrow's Java Flight client (flight-core 19.0.0 from Maven
Central, built from tests/interop/javaflight) and no compression module on its classpath, as
a Java user has it: feather files that pyarrow compressed with LZ4 (its default) and ZSTD, and
Parquet, read with GetFlightInfo and DoGet at the endpoint's location."""
import json
import subprocess

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

from conftest import ROOT, Proc, free_port

JAVA = ROOT / "tests" / "interop" / "javaflight"
# Arrow's Java needs these to reach direct buffers on Java 17 and later.
JVM_FLAGS = ["--add-opens=java.base/java.nio=org.apache.arrow.memory.core,ALL-UNNAMED"]
ROWS = 100_000


@pytest.fixture(scope="module")
def java_client():
    subprocess.run(["mvn", "-q", "-B", "compile", "dependency:build-classpath",
                    "-Dmdep.outputFile=target/classpath.txt"], cwd=JAVA, check=True, timeout=900)
    classpath = f"{JAVA / 'target' / 'classes'}:{(JAVA / 'target' / 'classpath.txt').read_text().strip()}"
    assert "arrow-compression" not in classpath
    return ["java", *JVM_FLAGS, "-cp", classpath, "wirespeed.interop.ReadFlights"]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    data = tmp_path_factory.mktemp("data")
    table = pa.table({"x": pa.array(range(ROWS), pa.int64()), "s": [f"row {i}" for i in range(ROWS)]})
    feather.write_feather(table, data / "lz4.feather", chunksize=10_000)  # pyarrow's default: LZ4
    feather.write_feather(table, data / "zstd.arrow", compression="zstd", chunksize=10_000)
    feather.write_feather(table, data / "plain.arrow", compression="uncompressed", chunksize=10_000)
    pq.write_table(table, data / "t.parquet", row_group_size=30_000)
    assert pa.ipc.open_file(data / "lz4.feather").get_batch(0).num_rows == 10_000
    port = free_port()
    proc = Proc(["serve", str(data), "--listen", f"127.0.0.1:{port}"])
    proc.port = port
    yield proc
    proc.stop()


def test_java_reads_compressed_feather_and_parquet_without_a_codec(java_client, served):
    names = ["lz4.feather", "zstd.arrow", "plain.arrow", "t.parquet"]
    r = subprocess.run([*java_client, f"grpc+tcp://127.0.0.1:{served.port}", *names],
                       capture_output=True, text=True, timeout=300)
    got = {line["name"]: line for line in map(json.loads, r.stdout.splitlines())}
    assert r.returncode == 0, r.stdout + r.stderr
    for name in names:
        assert (got[name]["rows"], got[name]["sum"]) == (ROWS, ROWS * (ROWS - 1) // 2), got[name]
        assert got[name]["location"] == f"grpc+tcp://127.0.0.1:{served.port}"


def test_compression_when_the_operator_asks_for_it(tmp_path):
    """`--compression zstd`: batches go compressed (pyarrow reads them), stored LZ4 ones too,
    decompressed and compressed again."""
    table = pa.table({"x": pa.array(range(ROWS), pa.int64())})
    feather.write_feather(table, tmp_path / "lz4.feather", chunksize=10_000)
    port = free_port()
    proc = Proc(["serve", str(tmp_path), "--listen", f"127.0.0.1:{port}", "--compression", "zstd"])
    try:
        import pyarrow.flight as flight
        reader = flight.connect(f"grpc://127.0.0.1:{port}").do_get(flight.Ticket(b"lz4.feather"))
        assert reader.read_all().equals(table)
    finally:
        proc.stop()
