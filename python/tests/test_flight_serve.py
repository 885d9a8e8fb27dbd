"""`wirespeed.flight.serve`: the `wirespeed serve` service from Python, for any client."""

import functools

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.flight as pf
import pytest

import wirespeed
from wirespeed import flight
import tls_certs
from conftest import KEY, table


@pytest.fixture
def directory(tmp_path):
    feather.write_feather(table(seed=3), tmp_path / "t.arrow", compression="uncompressed")
    return tmp_path


def test_serve_a_directory_to_pyarrow_and_wirespeed_clients(directory):
    with flight.serve(directory, key=KEY) as server:
        assert {name for name, _ in server.planes} >= {"shm", "tcp"}
        theirs = pf.connect(server.location)
        info = theirs.get_flight_info(pf.FlightDescriptor.for_path("t.arrow"))
        assert theirs.do_get(info.endpoints[0].ticket).read_all().equals(table(seed=3))
        ours = flight.connect(server.location, key=KEY)
        reader = ours.do_get(info.endpoints[0].ticket)
        assert reader.plane == "shm" and reader.read_all().equals(table(seed=3))
        writer, results = ours.do_put(pf.FlightDescriptor.for_path("up.parquet"), table(9).schema)
        writer.write_table(table(9))
        writer.close()
        assert b'"rows":9' in results.read().to_pybytes()
        info = ours.get_flight_info(pf.FlightDescriptor.for_path("up.parquet"))
        assert ours.do_get(info.endpoints[0].ticket).read_all().num_rows == 9
        assert (directory / "up.parquet").exists()


def test_serve_on_a_unix_socket(directory, tmp_path):
    """A Unix socket, as pyarrow names one: wirespeed.flight's client reaches it as it is
    (pyarrow's needs localhost as the authority: see tests/interop), its data over shm."""
    location = f"grpc+unix://{tmp_path / 'flight.sock'}"
    with flight.serve(directory, location, key=KEY) as server:
        assert server.location == location
        ours = flight.connect(location, key=KEY)
        info = ours.get_flight_info(pf.FlightDescriptor.for_path("t.arrow"))
        reader = ours.do_get(info.endpoints[0].ticket)
        assert reader.plane == "shm" and reader.read_all().equals(table(seed=3))
        keyless = flight.connect(location, transport="grpc")
        assert keyless.do_get(info.endpoints[0].ticket).read_all().equals(table(seed=3))
    certs = tls_certs.make(tmp_path / "certs")
    tls = [(certs.read("server_cert"), certs.read("server_key"))]
    with pytest.raises(pa.ArrowInvalid, match="without TLS"):
        flight.serve(directory, f"grpc+unix://{tmp_path / 'tls.sock'}", tls_certificates=tls)


def test_serve_with_a_password(directory, tmp_path):
    with pytest.raises(pa.ArrowInvalid, match="in clear"):
        flight.serve(directory, password="sesame")
    certs = tls_certs.make(tmp_path / "certs")
    tls = [(certs.read("server_cert"), certs.read("server_key"))]
    with flight.serve(directory, password="sesame", tls_certificates=tls, key=KEY) as server:
        assert server.location.startswith("grpc+tls://")
        # With TLS: shm, which stays on this host, and tcp, sealed; not ucx (RDMA, in clear).
        assert [name for name, _ in server.planes] == ["shm", "tcp"]
        connect = functools.partial(flight.connect, tls_root_certs=certs.read("ca"))
        client = connect(server.location)
        with pytest.raises(flight.FlightUnauthenticatedError):
            client.get_flight_info(pf.FlightDescriptor.for_path("t.arrow"))
        header = client.authenticate_basic_token("user", "sesame")
        assert header[0] == b"authorization" and header[1].startswith(b"Bearer ")
        options = pf.FlightCallOptions(headers=[header])
        info = client.get_flight_info(pf.FlightDescriptor.for_path("t.arrow"), options)
        assert info.total_records == 20_000
        reader = connect(server.location, key=KEY).do_get(info.endpoints[0].ticket, options)
        assert reader.plane == "shm" and reader.read_all().equals(table(seed=3))
        reader = connect(server.location, key=KEY, transport="tcp").do_get(info.endpoints[0].ticket, options)
        assert reader.plane == "tcp" and reader.read_all().equals(table(seed=3))
        with pytest.raises(flight.FlightUnauthenticatedError):
            connect(server.location).authenticate_basic_token("user", "wrong")


def test_serve_refuses_what_is_not_a_directory(tmp_path):
    with pytest.raises(pa.ArrowInvalid, match="not a directory"):
        flight.serve(tmp_path / "missing")


def test_serve_names_itself_or_what_it_is_told_and_compresses_when_asked(tmp_path):
    feather.write_feather(table(seed=4), tmp_path / "lz4.feather")  # pyarrow's default: LZ4
    with flight.serve(tmp_path) as server:
        info = pf.connect(server.location).get_flight_info(pf.FlightDescriptor.for_path("lz4.feather"))
        assert [loc.uri.decode() for loc in info.endpoints[0].locations] == [f"grpc+tcp://127.0.0.1:{server.port}"]
    with flight.serve(tmp_path, advertise="grpc+tls://flight.example.org:443", compression="zstd") as server:
        client = pf.connect(server.location)
        info = client.get_flight_info(pf.FlightDescriptor.for_path("lz4.feather"))
        assert [loc.uri.decode() for loc in info.endpoints[0].locations] == ["grpc+tls://flight.example.org:443"]
        assert client.do_get(info.endpoints[0].ticket).read_all().equals(table(seed=4))
    with pytest.raises(wirespeed.UsageError, match="compression"):
        flight.serve(tmp_path, compression="snappy")
