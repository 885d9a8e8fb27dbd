"""wirespeed.flight's client against every kind of server: wirespeed's Python server,
`wirespeed serve`, and pyarrow's own Flight server."""

import gc
import threading
import time

import pyarrow as pa
import pyarrow.flight as pf
import pytest

import wirespeed
from wirespeed import flight
from conftest import KEY, Proc, free_port, plane, table


class PyarrowTables(pf.FlightServerBase):
    """The same service in pyarrow, as a foreign server."""

    def __init__(self):
        super().__init__("grpc://127.0.0.1:0")
        self.tables = {b"t": table()}
        self.actions = []

    def get_flight_info(self, context, descriptor):
        t = self.tables[descriptor.command]
        return pf.FlightInfo(t.schema, descriptor, [pf.FlightEndpoint(descriptor.command, [])], t.num_rows, t.nbytes)

    def do_get(self, context, ticket):
        if ticket.ticket not in self.tables:
            raise KeyError("no such table")
        return pf.RecordBatchStream(self.tables[ticket.ticket])

    def do_put(self, context, descriptor, reader, writer):
        self.tables[descriptor.command] = reader.read_all()
        writer.write(b"stored")

    def do_exchange(self, context, descriptor, reader, writer):
        writer.begin(reader.schema)
        for chunk in reader:
            writer.write_batch(chunk.data)

    def do_action(self, context, action):
        self.actions.append(action.type)
        return [pf.Result(action.body)]

    def list_actions(self, context):
        return [("echo", "its body")]


@pytest.fixture
def pyarrow_server():
    server = PyarrowTables()
    yield server
    server.shutdown()


@pytest.mark.parametrize("transport,expected", [("auto", "shm"), ("tcp", "tcp"), ("grpc", "grpc")])
def test_every_method_on_every_plane(py_server, transport, expected):
    client = flight.connect(py_server.location, key=KEY, transport=transport)
    descriptor = pf.FlightDescriptor.for_command(b"t")
    assert client.get_schema(descriptor).schema == table().schema
    info = client.get_flight_info(descriptor)
    assert info.total_records == 20_000

    reader = client.do_get(info.endpoints[0].ticket)
    assert plane(reader) == expected and reader.schema == table().schema
    chunks = list(reader)
    assert pa.Table.from_batches([c.data for c in chunks]).equals(table())

    writer, results = client.do_put(pf.FlightDescriptor.for_command(b"new"), table(500).schema)
    assert plane(writer) == expected
    writer.write_table(table(500), max_chunksize=100)
    writer.write_batch(table(7).to_batches()[0])
    writer.done_writing()
    assert results.read().to_pybytes() == b"507 rows"
    assert results.read() is None
    writer.close()
    assert client.do_get(pf.Ticket(b"new")).read_all().num_rows == 507

    writer, reader = client.do_exchange(pf.FlightDescriptor.for_command(b"x"))
    writer.begin(pa.schema([("a", pa.int64())]))
    writer.write_batch(pa.record_batch([pa.array([1, 2, 3])], names=["a"]))
    writer.done_writing()
    assert reader.read_all().column(0).to_pylist() == [2, 4, 6]

    assert [r.body.to_pybytes() for r in client.do_action(("echo", b"ping"))] == [b"ping"]
    assert any(a.type == "echo" for a in client.list_actions())
    client.close()
    with pytest.raises((flight.FlightError, pa.ArrowException)):
        client.list_actions()


def test_against_pyarrow_server_over_grpc(pyarrow_server):
    """A server that is not wirespeed's: everything on gRPC, even with a key."""
    with flight.connect(f"grpc://127.0.0.1:{pyarrow_server.port}", key=KEY) as client:
        info = client.get_flight_info(pf.FlightDescriptor.for_command(b"t"))
        reader = client.do_get(info.endpoints[0].ticket)
        assert plane(reader) == "grpc"
        assert reader.read_all().equals(table())
        writer, results = client.do_put(pf.FlightDescriptor.for_command(b"u"), table(10).schema)
        writer.write_table(table(10))
        writer.done_writing()
        assert results.read().to_pybytes() == b"stored"
        writer.close()
        assert pyarrow_server.tables[b"u"].equals(table(10))
        writer, reader = client.do_exchange(pf.FlightDescriptor.for_command(b"e"))
        writer.begin(table(5).schema)
        writer.write_table(table(5))
        writer.done_writing()
        assert reader.read_all().equals(table(5))
        assert list(client.do_action(pf.Action("echo", b"b")))[0].body.to_pybytes() == b"b"
        assert client.list_actions()[0].type == "echo"
        with pytest.raises(pa.ArrowKeyError):
            client.do_get(pf.Ticket(b"nope")).read_all()
        # It saw one ListActions (the hello, unanswered) and no action of ours.
        assert pyarrow_server.actions == ["echo"]


class SlowBatches(flight.FlightServerBase):
    """Sends three batches 0.1 s apart."""

    def list_actions(self, context):
        return []

    def do_get(self, context, ticket):
        def batches():
            for i in range(3):
                yield pa.record_batch([pa.array([i])], names=["a"])
                time.sleep(0.1)
        return flight.GeneratorStream(pa.schema([("a", pa.int64())]), batches())


@pytest.mark.parametrize("transport", ["shm", "tcp", "grpc"])
def test_a_reader_outlives_its_client(transport):
    server = SlowBatches("grpc://127.0.0.1:0", key=KEY)
    reader = flight.connect(server.location, key=KEY, transport=transport).do_get(pf.Ticket(b"x"))
    gc.collect()  # the client is gone; its call goes on
    assert reader.read_all().column(0).to_pylist() == [0, 1, 2]
    server.shutdown()


def test_against_wirespeed_serve(served):
    with flight.connect(served.url, key=KEY) as client:
        info = next(client.list_flights())
        # serve names itself, as the client reached it; the planes stay out of sight.
        port = served.url.rsplit(":", 1)[1]
        assert [loc.uri.decode() for loc in info.endpoints[0].locations] == [f"grpc+tcp://127.0.0.1:{port}"]
        reader = client.do_get(info.endpoints[0].ticket)
        assert reader.plane == "shm"
        assert reader.read_all().equals(table(seed=1))


def test_errors_raise_the_right_classes(py_server, served):
    client = flight.connect(py_server.location, key=KEY)
    with pytest.raises(pa.ArrowKeyError):
        client.get_flight_info(pf.FlightDescriptor.for_command(b"missing"))
    # A handler's failure on a data plane: the class pyarrow's server gives it (a server
    # error, for any exception Arrow has no code for), and wirespeed's.
    with pytest.raises(flight.FlightServerError, match="exploded") as e:
        client.do_get(pf.Ticket(b"boom")).read_all()
    assert isinstance(e.value, wirespeed.Error)
    with pytest.raises(pa.ArrowNotImplementedError):
        list(client.do_action(pf.Action("nothing", b"")))
    # A wrong key: the server does not answer its hello, so no plane is offered to it; asked
    # for one, the client says so rather than falling back silently.
    wrong = flight.connect(served.url, key="not the key", transport="shm")
    with pytest.raises(flight.FlightUnavailableError, match="offers no shm"):
        wrong.do_get(next(wrong.list_flights()).endpoints[0].ticket)
    # The server gone: over gRPC, pyarrow's class and wirespeed's, as on a plane.
    port = free_port()
    with pytest.raises(flight.FlightUnavailableError) as gone:
        flight.connect(f"grpc://127.0.0.1:{port}").list_actions()
    assert isinstance(gone.value, wirespeed.ConnectionFailedError), repr(gone.value)
    with pytest.raises(wirespeed.NotFoundError):
        flight.connect(py_server.location).get_flight_info(pf.FlightDescriptor.for_command(b"missing"))
    with pytest.raises(wirespeed.UsageError):
        flight.connect(py_server.location, key=KEY, transport="carrier-pigeon")
    with pytest.raises(wirespeed.AuthenticationError, match="needs a key"):
        flight.connect(py_server.location, transport="shm")


def test_an_exchange_handler_that_raises_fails_the_call(py_server):
    client = flight.connect(py_server.location, key=KEY)
    writer, reader = client.do_exchange(pf.FlightDescriptor.for_command(b"fail"))
    writer.begin(pa.schema([("a", pa.int64())]))
    with pytest.raises(pa.ArrowInvalid, match="no exchange today"):
        reader.read_all()


@pytest.mark.parametrize("transport", ["shm", "tcp", "grpc"])
def test_server_gone_mid_stream(tmp_path, transport):
    """The server killed while a client reads: the read fails with a Flight error, not a hang."""
    import pyarrow.feather as feather

    data = tmp_path / "d"
    data.mkdir()
    # About 45 MB: more than the stream's window and the ring, so the server cannot have sent it
    # all before it is killed.
    feather.write_feather(table(2_000_000), data / "big.arrow", compression="uncompressed", chunksize=1000)
    proc = Proc(["serve", str(data), "--listen", f"127.0.0.1:{free_port()}"])
    client = flight.connect(proc.url, key=KEY, transport=transport)
    reader = client.do_get(next(client.list_flights()).endpoints[0].ticket)
    assert plane(reader) == transport
    reader.read_chunk()
    proc.stop()
    # The same classes on every plane and on gRPC: pyarrow's, and wirespeed's for the code.
    with pytest.raises(flight.FlightError) as e:
        reader.read_all()
    assert isinstance(e.value, (flight.FlightUnavailableError, flight.FlightCancelledError)), repr(e.value)
    assert isinstance(e.value, wirespeed.ConnectionFailedError) and e.value.exit_code == 4


def test_a_shm_batch_is_not_copied_and_is_released(served):
    """The batch's buffers lie in the shared mapping; dropping the table lets it go."""
    client = flight.connect(served.url, key=KEY)
    table_ = client.do_get(next(client.list_flights()).endpoints[0].ticket).read_all()
    address = table_.column("a").chunks[0].buffers()[1].address
    maps = [line.split() for line in open("/proc/self/maps")]
    holder = [m for m in maps if int(m[0].split("-")[0], 16) <= address < int(m[0].split("-")[1], 16)]
    assert holder and "memfd:wirespeed" in " ".join(holder[0][5:]), holder
    pool_before = pa.total_allocated_bytes()
    del table_
    gc.collect()
    assert pa.total_allocated_bytes() <= pool_before


def test_many_clients_at_once(py_server):
    errors = []

    def one():
        try:
            c = flight.connect(py_server.location, key=KEY)
            for _ in range(5):
                assert c.do_get(pf.Ticket(b"small")).read_all().num_rows == 100
            c.close()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=one) for _ in range(16)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors, errors


def test_arrow_c_stream_consumers(py_server):
    client = flight.connect(py_server.location, key=KEY)
    assert pa.table(client.do_get(pf.Ticket(b"t"))).equals(table())
    reader = client.do_get(pf.Ticket(b"t")).to_reader()
    assert isinstance(reader, pa.RecordBatchReader) and reader.read_all().equals(table())


def test_a_shared_table_is_mapped_not_sent(py_server):
    """flight.share: the server's table in sealed memory; the client's batches lie in it."""
    py_server.tables[b"shared"] = flight.share(table(100_000))
    client = flight.connect(py_server.location, key=KEY)
    got = client.do_get(pf.Ticket(b"shared")).read_all()
    assert got.equals(table(100_000))
    address = got.column("a").chunks[0].buffers()[1].address
    maps = [line.split() for line in open("/proc/self/maps")]
    holder = [m for m in maps if int(m[0].split("-")[0], 16) <= address < int(m[0].split("-")[1], 16)]
    assert holder and "memfd:wirespeed-sealed" in " ".join(holder[0][5:]), holder
    # Over tcp the same table travels as bytes.
    assert flight.connect(py_server.location, key=KEY, transport="tcp").do_get(pf.Ticket(b"shared")).read_all().equals(got)


class ReadsAllFirst(flight.FlightServerBase):
    """An exchange handler that reads its whole input before it writes, as pyarrow allows."""

    def list_actions(self, context):
        return []

    def do_exchange(self, context, descriptor, reader, writer):
        got = reader.read_all()
        writer.begin(got.schema)
        writer.write_table(got)


@pytest.mark.parametrize("transport", ["auto", "tcp", "grpc"])
def test_an_exchange_whose_handler_reads_everything_first(transport):
    server = ReadsAllFirst("grpc://127.0.0.1:0", key=KEY)
    client = flight.connect(server.location, key=KEY, transport=transport)
    writer, reader = client.do_exchange(pf.FlightDescriptor.for_command(b"echo"))
    writer.begin(table(5000).schema)
    writer.write_table(table(5000), max_chunksize=1000)
    writer.done_writing()
    assert reader.read_all().equals(table(5000))
    assert plane(reader) == {"auto": "shm"}.get(transport, transport)
    server.shutdown()


@pytest.mark.parametrize("transport", ["auto", "tcp"])
def test_closing_an_exchange_before_reading_loses_no_answer(transport):
    server = ReadsAllFirst("grpc://127.0.0.1:0", key=KEY)
    writer, reader = flight.connect(server.location, key=KEY, transport=transport).do_exchange(
        pf.FlightDescriptor.for_command(b"echo"))
    writer.begin(table(3000).schema)
    writer.write_table(table(3000))
    writer.close()
    assert reader.read_all().equals(table(3000))
    server.shutdown()


def test_a_python_server_under_tls_seals_its_tcp_plane(tmp_path):
    """A keyed wirespeed.flight server with TLS offers shm and tcp (its calls sealed, its
    locations saying so), not ucx; a keyed client forced onto tcp reads everything."""
    import tls_certs

    certs = tls_certs.make(tmp_path / "certs")

    class Server(flight.FlightServerBase):
        def list_actions(self, context):
            return []

        def do_get(self, context, ticket):
            return flight.RecordBatchStream(table())

    server = Server("grpc+tls://127.0.0.1:0", tls_certificates=[(certs.read("server_cert"), certs.read("server_key"))],
                    key=KEY)
    try:
        _, locations = server._planes.locations("get", b"t", "127.0.0.1")
        assert [loc.split("://")[0] for loc in locations] == ["wirespeed+shm", "wirespeed+tcp"]
        assert ["seal=aes-256-gcm" in loc for loc in locations] == [False, True]
        client = flight.connect(server.location, key=KEY, transport="tcp", tls_root_certs=certs.read("ca"))
        reader = client.do_get(pf.Ticket(b"t"))
        assert plane(reader) == "tcp" and reader.read_all().equals(table())
    finally:
        server.shutdown()


def test_a_flight_errors_extra_info_crosses_a_plane():
    class Failing(flight.FlightServerBase):
        def do_get(self, context, ticket):
            raise pf.FlightUnauthorizedError("not yours", b"\x00why: policy 7")

    with Failing(key=KEY) as server:
        client = flight.connect(server.location, key=KEY, transport="shm")
        with pytest.raises(pf.FlightUnauthorizedError, match="not yours") as e:
            client.do_get(pf.Ticket(b"t")).read_all()
        assert e.value.extra_info == b"\x00why: policy 7"


class DocumentedHabits(flight.FlightServerBase):
    """A server written as pyarrow's documentation writes one."""

    def __init__(self, **kwargs):
        super().__init__("grpc://127.0.0.1:0", **kwargs)
        self.uploads = {}

    def do_put(self, context, descriptor, reader, writer):
        self.uploads[descriptor.command] = reader.to_reader().read_all()

    def do_get(self, context, ticket):
        raise KeyError(f"no flight {ticket.ticket!r}")


@pytest.mark.parametrize("key", [None, KEY], ids=["grpc", "plane"])
def test_a_key_changes_nothing_a_documented_program_sees(key):
    """A do_put reader's to_reader(), and a do_get handler's KeyError, as pyarrow gives them:
    ArrowKeyError, no Flight error, no extra_info."""
    server = DocumentedHabits(key=key)
    try:
        client = flight.connect(server.location, key=key)
        t = table()
        writer, _ = client.do_put(pf.FlightDescriptor.for_command(b"up"), t.schema)
        writer.write_table(t)
        writer.close()
        assert plane(writer) == ("shm" if key else "grpc")
        assert server.uploads[b"up"].equals(t)
        with pytest.raises(pa.ArrowKeyError, match="no flight") as e:
            client.do_get(pf.Ticket(b"nothing")).read_all()
        assert not isinstance(e.value, pf.FlightError)
        assert getattr(e.value, "extra_info", None) is None
    finally:
        server.shutdown()


@pytest.mark.parametrize("key", [None, KEY], ids=["grpc", "plane"])
def test_a_writer_refuses_custom_metadata_as_pyarrows_does(key):
    """pyarrow's Flight writers take no custom_metadata (a TypeError), rather than drop it."""
    server = DocumentedHabits(key=key)
    try:
        ours = flight.connect(server.location, key=key)
        theirs = pf.connect(server.location)
        batch = table().to_batches()[0]
        for client in (theirs, ours):
            writer, _ = client.do_put(pf.FlightDescriptor.for_command(b"up"), batch.schema)
            with pytest.raises(TypeError):
                writer.write_batch(batch, custom_metadata={"k": "v"})
            writer.write_batch(batch)
            writer.close()
            assert server.uploads[b"up"].num_rows == batch.num_rows
    finally:
        server.shutdown()
