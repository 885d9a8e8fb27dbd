"""Arrow Flight interop in both directions, with the real binaries:
pyarrow.flight against `wirespeed serve` / `wirespeed bench flight-server`, and the wirespeed
client (`wirespeed get`, `wirespeed bench flight`) against pyarrow.flight servers."""
import json
import os
import signal
import subprocess
import threading
import time

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.flight as flight
import pyarrow.parquet as pq
import pytest

from conftest import ROOT, Proc, free_port, python, run, table


def names(infos):
    return sorted("/".join(p.decode() for p in i.descriptor.path) for i in infos)


def test_pyarrow_lists_and_describes_every_file(served):
    c = flight.connect(served.url)
    infos = list(c.list_flights())
    assert names(infos) == sorted(served.files)
    for info in infos:
        name = "/".join(p.decode() for p in info.descriptor.path)
        assert info.total_records == served.files[name].num_rows
        assert info.schema.equals(served.files[name].schema)
        # The server names itself, as this client reached it.
        port = served.url.rsplit(":", 1)[1]
        assert [loc.uri.decode() for loc in info.endpoints[0].locations] == [f"grpc+tcp://127.0.0.1:{port}"]
    schema = c.get_schema(flight.FlightDescriptor.for_path("sub/t.parquet")).schema
    assert schema.equals(served.files["sub/t.parquet"].schema)


def test_pyarrow_reads_every_file(served):
    c = flight.connect(served.url)
    for name, expected in served.files.items():
        info = c.get_flight_info(flight.FlightDescriptor.for_path(name))
        got = c.do_get(info.endpoints[0].ticket).read_all()
        assert got.equals(expected), name


def test_pyarrow_uploads_land_atomically(served):
    c = flight.connect(served.url)
    t = table(rows=30_000, seed=7)
    for name in ["up/new.arrow", "up/new.parquet"]:
        writer, answer = c.do_put(flight.FlightDescriptor.for_path(name), t.schema)
        writer.write_table(t, max_chunksize=4096)
        writer.done_writing()
        result = json.loads(answer.read().to_pybytes())
        writer.close()
        assert result == {"path": name, "rows": t.num_rows}
        info = c.get_flight_info(flight.FlightDescriptor.for_path(name))
        assert c.do_get(info.endpoints[0].ticket).read_all().equals(t)
    assert feather.read_table(served.dir / "up" / "new.arrow").equals(t)
    assert pq.read_table(served.dir / "up" / "new.parquet").equals(t)
    assert not [p for p in (served.dir / "up").iterdir() if p.name.startswith(".")]


def test_a_client_killed_mid_upload_leaves_nothing(served):
    script = f"""
import os, pyarrow as pa, pyarrow.flight as flight
c = flight.connect({served.url!r})
t = pa.table({{"a": pa.array(range(100_000), pa.int64())}})
w, _ = c.do_put(flight.FlightDescriptor.for_path("up/killed.arrow"), t.schema)
for _ in range(50):
    w.write_table(t)
os._exit(9)
"""
    proc = subprocess.run([python(), "-c", script], timeout=60)
    assert proc.returncode == 9
    deadline = time.time() + 10
    up = served.dir / "up"
    while time.time() < deadline and up.exists() and any(up.iterdir()):
        time.sleep(0.1)
    assert not (up / "killed.arrow").exists()
    assert not up.exists() or not list(up.iterdir()), list(up.iterdir())
    # The server still serves.
    c = flight.connect(served.url)
    assert len(list(c.list_flights())) == len(served.files)


def test_errors_reach_pyarrow_with_their_codes(served):
    c = flight.connect(served.url)
    with pytest.raises(flight.FlightError if False else KeyError):  # NOT_FOUND is a KeyError in pyarrow
        c.get_flight_info(flight.FlightDescriptor.for_path("missing.arrow"))
    with pytest.raises(KeyError):
        c.do_get(flight.Ticket(b"missing.arrow")).read_all()
    with pytest.raises(pa.ArrowInvalid):
        c.get_flight_info(flight.FlightDescriptor.for_path("../escape.arrow"))
    with pytest.raises(pa.ArrowInvalid):
        c.get_flight_info(flight.FlightDescriptor.for_command(b"select 1"))
    writer, _ = c.do_put(flight.FlightDescriptor.for_path("bad.csv"), table(10).schema)
    with pytest.raises(pa.ArrowInvalid):
        writer.write_table(table(10))
        writer.close()


def test_pyarrow_exchanges_with_wirespeed(perf_server):
    c = flight.connect(perf_server.url)
    t = table(rows=10_000)
    writer, reader = c.do_exchange(flight.FlightDescriptor.for_command(b"echo"))
    writer.begin(t.schema)
    for b in t.to_batches(max_chunksize=1000):
        writer.write_batch(b)
        assert reader.read_chunk().data.equals(b)
    writer.done_writing()
    with pytest.raises(StopIteration):
        reader.read_chunk()
    writer.close()


def test_basic_auth_and_bearer_tokens(tmp_path):
    (tmp_path / "d").mkdir()
    feather.write_feather(table(100), tmp_path / "d" / "t.arrow")
    proc = Proc(["serve", str(tmp_path / "d"), "--listen", f"127.0.0.1:{free_port()}", "--password-over-plaintext"],
                env={"WIRESPEED_FLIGHT_PASSWORD": "s3cret"})
    try:
        c = flight.connect(proc.url)
        with pytest.raises(flight.FlightUnauthenticatedError):
            list(c.list_flights())
        with pytest.raises(flight.FlightUnauthenticatedError):
            c.authenticate_basic_token("me", "wrong")
        header = c.authenticate_basic_token("me", "s3cret")
        options = flight.FlightCallOptions(headers=[header])
        assert names(c.list_flights(options=options)) == ["t.arrow"]
        clear = "--password-over-plaintext"
        r = run("get", proc.url, "t.arrow", "-o", str(tmp_path / "out.arrow"), clear,
                env={"WIRESPEED_FLIGHT_PASSWORD": "s3cret"})
        assert r.returncode == 0, r.stderr
        r = run("get", proc.url, "t.arrow", "-o", str(tmp_path / "no.arrow"), clear,
                env={"WIRESPEED_FLIGHT_PASSWORD": "x"})
        assert r.returncode == 3 and "password" in r.stderr, r.stderr
    finally:
        proc.stop()


class TableServer(flight.FlightServerBase):
    """A plain pyarrow.flight server: one flight per table; it notes the actions it is sent."""

    def __init__(self, location, tables):
        super().__init__(location)
        self.tables = tables
        self.actions = []

    def do_action(self, context, action):
        self.actions.append(action.type)
        raise flight.FlightServerError(f"unknown action {action.type}")

    def get_flight_info(self, context, descriptor):
        name = descriptor.path[0].decode()
        if name not in self.tables:
            raise KeyError(name)
        t = self.tables[name]
        return flight.FlightInfo(t.schema, descriptor, [flight.FlightEndpoint(name.encode(), [])], t.num_rows, -1)

    def do_get(self, context, ticket):
        return flight.RecordBatchStream(self.tables[ticket.ticket.decode()])


@pytest.fixture
def pyarrow_server():
    port = free_port()
    t = table(rows=40_000, seed=5)
    server = TableServer(f"grpc://127.0.0.1:{port}", {"t": t})
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    yield f"grpc://127.0.0.1:{port}", t, server
    server.shutdown()


def test_serve_on_a_unix_socket_for_pyarrow_and_wirespeed_get(tmp_path):
    """`serve --listen grpc+unix://PATH`, as pyarrow names a Unix socket: pyarrow reads and
    uploads over it, and `wirespeed get`, holding the key, takes the data over shm. A server
    killed leaves its socket file; the next one on that path takes it over. pyarrow's gRPC
    names the socket's path as the HTTP/2 authority, which h2 (under tonic) refuses
    (hyperium/h2#487): a pyarrow client names localhost instead, as wirespeed.flight's does."""
    d = tmp_path / "d"
    d.mkdir()
    t = table(rows=20_000, seed=9)
    feather.write_feather(t, d / "t.arrow", compression="uncompressed")
    url = f"grpc+unix://{tmp_path / 'flight.sock'}"
    for _ in range(2):
        proc = Proc(["serve", str(d), "--listen", url], pattern=r"grpc\+unix://\S+")
        try:
            assert proc.url == url
            c = flight.connect(url, generic_options=[("grpc.default_authority", "localhost")])
            info = c.get_flight_info(flight.FlightDescriptor.for_path("t.arrow"))
            assert [loc.uri.decode() for loc in info.endpoints[0].locations] == [url]
            assert c.do_get(info.endpoints[0].ticket).read_all().equals(t)
            writer, answer = c.do_put(flight.FlightDescriptor.for_path("up.arrow"), t.schema)
            writer.write_table(t)
            writer.done_writing()
            assert json.loads(answer.read().to_pybytes())["rows"] == t.num_rows
            writer.close()
            r = run("get", url, "up.arrow", "-o", str(tmp_path / "back.arrow"), "-v")
            assert r.returncode == 0, r.stderr
            assert "over shm" in r.stderr, r.stderr
            assert feather.read_table(tmp_path / "back.arrow").equals(t)
        finally:
            proc.stop()


def test_wirespeed_get_from_a_pyarrow_server(pyarrow_server, tmp_path):
    url, t, server = pyarrow_server
    r = run("get", url, "t", "-o", str(tmp_path / "t.arrow"), "-v")
    assert r.returncode == 0, r.stderr
    assert "over grpc" in r.stderr, r.stderr
    # The client holds a key, but this server said nothing to its hello: it is sent no
    # wirespeed action, so it sees no call fail.
    assert server.actions == []
    assert feather.read_table(tmp_path / "t.arrow").equals(t)
    r = run("get", url, "t", "-o", str(tmp_path / "t.parquet"))
    assert r.returncode == 0, r.stderr
    assert pq.read_table(tmp_path / "t.parquet").equals(t)
    r = run("get", url, "missing", "-o", str(tmp_path / "m.arrow"))
    assert r.returncode != 0 and r.stderr.count("\n") == 1, r.stderr
    assert not list(tmp_path.glob("*m.arrow*"))


def test_get_writes_devices_and_pipes_in_place(pyarrow_server, tmp_path):
    # `-o /dev/null` once renamed a part file over /dev/null: a device or a pipe is written
    # in place, and stays what it was. A null device of our own stands in for /dev/null.
    url, t, _ = pyarrow_server
    null, fifo = tmp_path / "null", tmp_path / "fifo"
    if os.geteuid() == 0:
        os.mknod(null, 0o666 | 0o020000, os.makedev(1, 3))
        r = run("get", url, "t", "-o", str(null))
        assert r.returncode == 0, r.stderr
        assert null.is_char_device()
    os.mkfifo(fifo)
    got = {}
    reader = threading.Thread(target=lambda: got.setdefault("bytes", fifo.read_bytes()))
    reader.start()
    r = run("get", url, "t", "-o", str(fifo))
    reader.join(timeout=60)
    assert r.returncode == 0, r.stderr
    assert fifo.is_fifo()
    assert pa.ipc.open_file(pa.BufferReader(got["bytes"])).read_all().equals(t)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (null, fifo) if p.exists())


def test_wirespeed_bench_against_pyarrows_perf_server(tmp_path):
    port = free_port()
    server = subprocess.Popen([python(), str(ROOT / "bench" / "flight_perf_pyarrow.py"), "serve", f"grpc://127.0.0.1:{port}"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert "listening" in server.stdout.readline()
        for extra in [[], ["-test_put"]]:
            r = run("bench", "flight", "-server_host", "127.0.0.1", "-server_port", str(port), "-num_streams", "3",
                    "-num_threads", "2", "-records_per_stream", "100000", "--json", *extra)
            assert r.returncode == 0, r.stderr
            report = json.loads(r.stdout)
            assert report["bytes"] == 3 * 100_000 * 32 and report["transport"] == "grpc", report
    finally:
        server.send_signal(signal.SIGKILL)
        server.wait()


def test_wirespeed_bench_flight_measures_the_plane_it_names_libfabric_included():
    """Its own perf server offers the plane asked for, ofi+<provider> too."""
    for transport in ["shm", "ofi+tcp"]:
        r = run("bench", "flight", "-transport", transport, "-num_streams", "2", "-num_threads", "2",
                "-records_per_stream", "100000", "--json")
        assert r.returncode == 0, r.stderr
        report = json.loads(r.stdout)
        assert report["bytes"] == 2 * 100_000 * 32 and report["transport"] == transport, report


def test_cached_tables_are_served_from_memory_until_their_file_changes(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    path = d / "t.arrow"
    first, second, third = table(seed=1), table(seed=2), table(seed=3)
    feather.write_feather(first, path, compression="uncompressed")
    proc = Proc(["serve", str(d), "--listen", f"127.0.0.1:{free_port()}", "--cache-mb", "64"])
    try:
        c = flight.connect(proc.url)
        ticket = c.get_flight_info(flight.FlightDescriptor.for_path("t.arrow")).endpoints[0].ticket
        assert c.do_get(ticket).read_all().equals(first)
        deadline = time.time() + 30
        while not any("cached t.arrow" in line for line in proc.output):
            assert time.time() < deadline, proc.output
            time.sleep(0.05)

        # New bytes under the same inode, length and mtime: the cache cannot tell, so what it
        # serves shows that it came from memory.
        st = path.stat()
        with open(path, "r+b") as f:
            feather.write_feather(second, f, compression="uncompressed")
            assert f.tell() == st.st_size
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert c.do_get(ticket).read_all().equals(first)
        r = run("get", proc.url, "t.arrow", "-o", str(tmp_path / "shm.arrow"), "-v")
        assert r.returncode == 0 and "over shm" in r.stderr, r.stderr
        assert feather.read_table(tmp_path / "shm.arrow").equals(first)

        # A file renamed into place, as uploads are, is read afresh.
        feather.write_feather(third, d / ".t.arrow.new", compression="uncompressed")
        os.replace(d / ".t.arrow.new", path)
        assert c.do_get(ticket).read_all().equals(third)
    finally:
        proc.stop()
