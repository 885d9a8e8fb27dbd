"""DuckDB and Polars read a wirespeed.flight reader through the Arrow C stream interface
(`__arrow_c_stream__`, as `duckdb.sql("... from reader")` and `polars.DataFrame(reader)` take
it): no read_all() first, and over shared memory the batches are not copied on the way
(Polars' columns lie in the ring's mapping)."""

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.feather as feather
import pytest

from conftest import KEY, Proc
from wirespeed import flight

ROWS = 400_000


@pytest.fixture
def server(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    t = pa.table({"a": pa.array(range(ROWS), pa.int64()), "b": pa.array([i % 10 for i in range(ROWS)], pa.int32())})
    feather.write_feather(t, data / "t.arrow", compression="uncompressed", chunksize=65536)
    proc = Proc(["serve", str(data), "--listen", "127.0.0.1:0"])
    yield proc
    proc.stop()


def reader(server):
    client = flight.connect(server.url, key=KEY)
    r = client.do_get(client.get_flight_info(flight.FlightDescriptor.for_path("t.arrow")).endpoints[0].ticket)
    assert r.plane == "shm"
    return r


def mapping_of(address):
    for line in open("/proc/self/maps"):
        fields = line.split()
        start, end = (int(x, 16) for x in fields[0].split("-"))
        if start <= address < end:
            return " ".join(fields[5:])
    return ""


def test_duckdb_queries_a_reader_as_a_table(server):
    r = reader(server)
    [(count, total, tens)] = duckdb.sql("select count(*), sum(a), count(distinct b) from r").fetchall()
    assert (count, total, tens) == (ROWS, ROWS * (ROWS - 1) // 2, 10)
    assert r.stats.num_record_batches == ROWS // 65536 + 1, "duckdb pulled every batch from the stream itself"


def test_polars_takes_the_batches_where_they_arrived(server):
    frame = pl.DataFrame(reader(server))
    assert frame.height == ROWS and frame["a"].sum() == ROWS * (ROWS - 1) // 2
    # Back to pyarrow without a copy either way, chunk by chunk as polars holds them.
    address = frame.to_arrow().column("a").chunks[0].buffers()[1].address
    assert "memfd:wirespeed" in mapping_of(address), "polars' column lies in the shared ring: not copied"
    assert frame["b"].max() == 9
