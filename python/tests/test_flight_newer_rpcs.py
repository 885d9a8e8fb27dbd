"""Flight's RPCs and actions since Arrow 13, which pyarrow 26 lacks, in wirespeed.flight: the
client's methods (named as Arrow C++'s), FlightServerBase's hooks, `serve`'s expiring tickets,
and both servers' shutdown(deadline)."""

import threading
import time

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.flight as pf
import pytest

import wirespeed
from wirespeed import flight
from conftest import KEY, table


@pytest.fixture
def directory(tmp_path):
    feather.write_feather(table(seed=4), tmp_path / "t.arrow", compression="uncompressed")
    return tmp_path


# What a failed call raises: a Flight error, or (pyarrow's client for NOT_FOUND and
# INVALID_ARGUMENT) an Arrow one.
FAILED = (pf.FlightError, pa.ArrowException)


def endpoint_of(client, name="t.arrow"):
    return client.get_flight_info(pf.FlightDescriptor.for_path(name)).endpoints[0]


def test_serve_gives_tickets_that_expire_and_renew(directory):
    with flight.serve(directory, key=KEY, ticket_ttl=1.0) as server:
        client = flight.connect(server.location, key=KEY)
        info = client.get_flight_info(pf.FlightDescriptor.for_path("t.arrow"))
        assert info.ordered and b'"format":"arrow-file"' in info.app_metadata
        endpoint = info.endpoints[0]
        expires = endpoint.expiration_time
        assert expires is not None and expires.value > time.time_ns()
        # pyarrow's own client reads the data by the same ticket, over gRPC.
        assert pf.connect(server.location).do_get(endpoint.ticket).read_all().equals(table(seed=4))
        time.sleep(0.05)
        renewed = client.renew_flight_endpoint(flight.RenewFlightEndpointRequest(endpoint))
        assert renewed.expiration_time.value > expires.value
        time.sleep(1.1)
        for plane_or_grpc in (client, pf.connect(server.location)):
            with pytest.raises(FAILED, match="expired"):
                plane_or_grpc.do_get(endpoint.ticket).read_all()
        with pytest.raises(FAILED, match="expired"):
            client.renew_flight_endpoint(endpoint)
        # A ticket made by hand, or altered, is refused alike.
        forged = pf.Ticket(endpoint.ticket.ticket.replace(b"t.arrow", b"x.arrow", 1))
        for ticket in (pf.Ticket(b"t.arrow"), forged):
            with pytest.raises(FAILED, match="GetFlightInfo"):
                client.do_get(ticket).read_all()
        assert client.do_get(endpoint_of(client).ticket).read_all().num_rows == table(seed=4).num_rows


def test_poll_cancel_and_sessions_against_serve(directory):
    with flight.serve(directory) as server:
        client = flight.connect(server.location)
        poll = client.poll_flight_info(pf.FlightDescriptor.for_path("t.arrow"))
        assert poll.progress == 1.0 and poll.flight_descriptor is None
        assert poll.info.schema == table(seed=4).schema
        with pytest.raises(FAILED, match="no flight"):
            client.poll_flight_info(pf.FlightDescriptor.for_path("none.arrow"))
        cancelled = client.cancel_flight_info(flight.CancelFlightInfoRequest(poll.info))
        assert cancelled.status == flight.CancelStatus.NOT_CANCELLABLE
        with pytest.raises(FAILED, match="do not expire"):
            client.renew_flight_endpoint(endpoint_of(client))
        assert client.set_session_options({"catalog": "main", "limit": 10, "fast": True, "tags": ["a", "b"]}) == {}
        assert client.get_session_options() == {"catalog": "main", "limit": 10, "fast": True, "tags": ["a", "b"]}
        assert client.set_session_options({"limit": None}) == {}
        assert client.get_session_options() == {"catalog": "main", "fast": True, "tags": ["a", "b"]}
        other = flight.connect(server.location)
        assert other.get_session_options() == {}, "a session is one client's"
        client.close_session()
        assert client.get_session_options() == {}
        with pytest.raises(wirespeed.UsageError, match="session option"):
            client.set_session_options({"bad": object()})


def test_the_calls_carry_the_programs_token(directory):
    with flight.serve(directory, password="sesame", password_over_plaintext=True) as server:
        client = flight.connect(server.location)
        with pytest.raises(pf.FlightUnauthenticatedError):
            client.poll_flight_info(pf.FlightDescriptor.for_path("t.arrow"))
        token = client.authenticate_basic_token("user", "sesame")
        options = pf.FlightCallOptions(headers=[token])
        assert client.poll_flight_info(pf.FlightDescriptor.for_path("t.arrow"), options).progress == 1.0
        assert client.set_session_options({"a": "b"}, options) == {}
        assert client.get_session_options(options) == {"a": "b"}


class Hooks(flight.FlightServerBase):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.cancelled = []

    def cancel_flight_info(self, context, request):
        self.cancelled.append(request.info.descriptor.path)
        return flight.CancelFlightInfoResult(flight.CancelStatus.CANCELLED)

    def renew_flight_endpoint(self, context, request):
        later = pa.scalar(time.time_ns() + 60_000_000_000, pa.timestamp("ns", "UTC"))
        return pf.FlightEndpoint(request.endpoint.ticket, [], expiration_time=later, app_metadata=b"renewed")

    def do_action(self, context, action):
        return [action.type.encode()]


def test_flight_server_base_hooks_answer_the_newer_actions():
    with Hooks() as server:
        client = flight.connect(f"grpc://127.0.0.1:{server.port}")
        info = pf.FlightInfo(pa.schema([]), pf.FlightDescriptor.for_path("q"), [], -1, -1)
        assert client.cancel_flight_info(info).status == flight.CancelStatus.CANCELLED
        assert server.cancelled == [[b"q"]]
        renewed = client.renew_flight_endpoint(pf.FlightEndpoint(b"tk", []))
        assert renewed.ticket.ticket == b"tk" and renewed.app_metadata == b"renewed"
        assert renewed.expiration_time.value > time.time_ns()
        # Other actions still reach the service's own do_action.
        assert [r.body.to_pybytes() for r in client.do_action(pf.Action("mine", b""))] == [b"mine"]
        # pyarrow's gRPC server has no PollFlightInfo to hook (UNIMPLEMENTED, which pyarrow
        # raises as NotImplementedError).
        with pytest.raises(NotImplementedError):
            client.poll_flight_info(pf.FlightDescriptor.for_path("q"))


class Slow(flight.FlightServerBase):
    """DoGets that take `pause` seconds between two batches."""

    pause = 0.0

    def do_get(self, context, ticket):
        def batches():
            yield pa.record_batch([pa.array([1, 2, 3])], names=["a"])
            time.sleep(self.pause)
            yield pa.record_batch([pa.array([4])], names=["a"])
        return flight.GeneratorStream(pa.schema([("a", pa.int64())]), batches())


@pytest.mark.parametrize("transport", ["grpc", "shm", "tcp"])
def test_flight_server_base_drains_on_shutdown_with_a_deadline(transport):
    server = Slow(key=KEY)
    server.pause = 0.6
    client = flight.connect(f"grpc://127.0.0.1:{server.port}", key=KEY, transport=transport)
    got, started = [], threading.Event()

    def read():
        reader = client.do_get(pf.Ticket(b"x"))
        started.set()
        got.append(reader.read_all().num_rows)

    reading = threading.Thread(target=read)
    reading.start()
    assert started.wait(10)
    time.sleep(0.1)
    stopping = threading.Thread(target=server.shutdown, args=(10.0,))
    stopping.start()
    time.sleep(0.1)
    # Refused: by the gate while plane calls finish, or by gRPC once pyarrow's shutdown began.
    with pytest.raises(pf.FlightUnavailableError):
        flight.connect(f"grpc://127.0.0.1:{server.port}").do_get(pf.Ticket(b"y")).read_all()
    reading.join(10)
    stopping.join(10)
    assert got == [4], "the call in flight finished"


def test_serve_drains_on_shutdown_with_a_deadline(directory):
    big = pa.table({"a": pa.array(range(8_000_000), pa.int64())})
    feather.write_feather(big, directory / "big.arrow", compression="uncompressed")
    server = flight.serve(directory, key=KEY)
    client = flight.connect(server.location, transport="grpc")
    # 64 MB that the client does not read: the server's call waits on HTTP/2's window.
    reader = client.do_get(endpoint_of(client, "big.arrow").ticket)
    assert server.shutdown(0.3) == 1, "the get left open is cancelled at the deadline"
    with pytest.raises(FAILED):
        reader.read_all()
    server = flight.serve(directory, key=KEY)
    assert server.shutdown(5.0) == 0
    with pytest.raises(pf.FlightUnavailableError):
        list(flight.connect(server.location).list_flights())


def planes_of_serve():
    return ["shm", "tcp", "ucx"]


@pytest.mark.parametrize("transport", planes_of_serve())
def test_serve_drains_plane_calls_and_cancels_them_past_the_deadline(directory, transport):
    # 128 MB: more than a plane holds in flight, so a reader that pauses holds the call open.
    big = pa.table({"a": pa.array(range(16_000_000), pa.int64())})
    feather.write_feather(big, directory / "big.arrow", compression="uncompressed")
    server = flight.serve(directory, key=KEY)
    if transport not in {name for name, _ in server.planes}:
        server.shutdown()
        pytest.skip(f"{transport} is not built in")
    client = flight.connect(server.location, key=KEY, transport=transport)
    ticket = endpoint_of(client, "big.arrow").ticket

    # Within the deadline: the get in flight finishes, new calls are refused.
    reader = client.do_get(ticket)
    assert reader.plane == transport
    reader.read_chunk()
    cancelled = []
    stopping = threading.Thread(target=lambda: cancelled.append(server.shutdown(20.0)))
    stopping.start()
    time.sleep(0.2)
    with pytest.raises(pf.FlightUnavailableError, match="shutting down"):
        client.do_get(ticket).read_all()
    assert stopping.is_alive(), "the server waits for the call in flight"
    assert reader.read_all().num_rows > 0
    stopping.join(20)
    assert cancelled == [0]

    # Past it: a paused get and an unfinished upload are cancelled; the upload leaves nothing.
    server = flight.serve(directory, key=KEY)
    client = flight.connect(server.location, key=KEY, transport=transport)
    reader = client.do_get(endpoint_of(client, "big.arrow").ticket)
    reader.read_chunk()
    writer, _ = client.do_put(pf.FlightDescriptor.for_path("up.arrow"), table(10).schema)
    writer.write_table(table(10))
    # The get at least (the upload too once its call has reached the server).
    assert server.shutdown(0.5) in (1, 2)
    with pytest.raises(FAILED):
        reader.read_all()
    with pytest.raises(FAILED):
        writer.close()
    assert sorted(p.name for p in directory.iterdir()) == ["big.arrow", "t.arrow"], "the cut upload left nothing"
