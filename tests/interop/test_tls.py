"""`wirespeed serve` over TLS with pyarrow's own client (gRPC's C++ TLS) and with `wirespeed
get`: the server checked against the client's roots, mutual TLS, a wrong CA, passwords only
inside TLS, and the bytes on the wire not readable."""
import socket
import subprocess
import threading

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.flight as fl
import pytest

import tls_certs
from conftest import BIN, Proc, free_port, run

PATTERN = b"readable-only-by-the-two-ends-"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return tls_certs.make(tmp_path_factory.mktemp("certs"))


def serve(tmp_path, certs=None, *extra, env=None):
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    feather.write_feather(pa.table({"s": [PATTERN.decode() + str(i) for i in range(20_000)]}), data / "t.arrow",
                          compression="uncompressed")
    tls = ["--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key)] if certs else []
    return Proc(["serve", str(data), "--listen", f"127.0.0.1:{free_port()}", *tls, *extra], env=env)


def fetch(client):
    info = client.get_flight_info(fl.FlightDescriptor.for_path("t.arrow"))
    return client.do_get(info.endpoints[0].ticket).read_all()


def test_pyarrow_with_the_ca_as_roots_lists_gets_and_puts(tmp_path, certs):
    proc = serve(tmp_path, certs)
    try:
        assert proc.url.startswith("grpc+tls://127.0.0.1:")
        client = fl.FlightClient(proc.url, tls_root_certs=certs.read("ca"))
        assert [f.descriptor.path for f in client.list_flights()] == [[b"t.arrow"]]
        assert fetch(client).num_rows == 20_000
        up = pa.table({"x": list(range(1000))})
        writer, _ = client.do_put(fl.FlightDescriptor.for_path("up.arrow"), up.schema)
        writer.write_table(up)
        writer.close()
        assert feather.read_table(tmp_path / "data" / "up.arrow").equals(up)
        # The same server by name: the certificate names localhost too.
        by_name = fl.FlightClient(proc.url.replace("127.0.0.1", "localhost"), tls_root_certs=certs.read("ca"))
        assert fetch(by_name).num_rows == 20_000
        # Each endpoint names the server over TLS, by the name this client used, and takes it.
        [endpoint] = by_name.get_flight_info(fl.FlightDescriptor.for_path("t.arrow")).endpoints
        port = proc.url.rsplit(":", 1)[1]
        assert [loc.uri.decode() for loc in endpoint.locations] == [f"grpc+tls://localhost:{port}"]
        there = fl.FlightClient(endpoint.locations[0], tls_root_certs=certs.read("ca"))
        assert there.do_get(endpoint.ticket).read_all().num_rows == 20_000
    finally:
        proc.stop()


def test_a_client_trusting_another_ca_is_refused(tmp_path, certs):
    proc = serve(tmp_path, certs)
    try:
        with pytest.raises(fl.FlightUnavailableError):
            fetch(fl.FlightClient(proc.url, tls_root_certs=certs.read("other_ca")))
        r = run("get", proc.url, "t.arrow", "-o", str(tmp_path / "o.arrow"), "--tls-roots", str(certs.other_ca))
        assert r.returncode != 0
        assert "UnknownIssuer" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not (tmp_path / "o.arrow").exists()
        # Verification off only by name: encrypted, the server unchecked.
        r = run("get", proc.url, "t.arrow", "-o", str(tmp_path / "o.arrow"), "--tls-insecure", "--transport", "grpc")
        assert r.returncode == 0, r.stderr
    finally:
        proc.stop()


def test_wirespeed_get_over_tls_takes_the_shm_plane_with_a_key_and_tcp_sealed(tmp_path, certs):
    proc = serve(tmp_path, certs)
    try:
        r = run("get", proc.url, "t.arrow", "-o", str(tmp_path / "o.arrow"), "--tls-roots", str(certs.ca), "-v")
        assert r.returncode == 0, r.stderr
        assert "over shm" in r.stderr
        assert feather.read_table(tmp_path / "o.arrow").equals(feather.read_table(tmp_path / "data" / "t.arrow"))
        # The tcp plane is offered under TLS, its calls sealed; ucx (RDMA, unencrypted) only when named.
        r = run("get", proc.url, "t.arrow", "-o", str(tmp_path / "o2.arrow"), "--tls-roots", str(certs.ca),
                "--transport", "tcp", "-v")
        assert r.returncode == 0 and "over tcp" in r.stderr, r.stderr
        assert feather.read_table(tmp_path / "o2.arrow").equals(feather.read_table(tmp_path / "data" / "t.arrow"))
        r = run("get", proc.url, "t.arrow", "-o", str(tmp_path / "o3.arrow"), "--tls-roots", str(certs.ca),
                "--transport", "ucx")
        assert r.returncode != 0 and "offers no ucx" in r.stderr, r.stderr
    finally:
        proc.stop()


def test_mutual_tls_needs_a_client_certificate_from_its_ca(tmp_path, certs):
    proc = serve(tmp_path, certs, "--tls-client-ca", str(certs.ca))
    try:
        client = fl.FlightClient(proc.url, tls_root_certs=certs.read("ca"), cert_chain=certs.read("client_cert"),
                                 private_key=certs.read("client_key"))
        assert fetch(client).num_rows == 20_000
        with pytest.raises(fl.FlightError):
            fetch(fl.FlightClient(proc.url, tls_root_certs=certs.read("ca")))
        mine = ["--tls-roots", str(certs.ca), "--tls-cert", str(certs.client_cert), "--tls-key", str(certs.client_key)]
        r = run("get", proc.url, "t.arrow", "-o", str(tmp_path / "o.arrow"), *mine)
        assert r.returncode == 0, r.stderr
        r = run("get", proc.url, "t.arrow", "-o", str(tmp_path / "o2.arrow"), "--tls-roots", str(certs.ca))
        assert r.returncode != 0 and not (tmp_path / "o2.arrow").exists()
        assert "certificate" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    finally:
        proc.stop()


def test_a_password_travels_only_inside_tls_unless_asked_for_by_name(tmp_path, certs):
    env = {"WIRESPEED_FLIGHT_PASSWORD": "s3cret"}
    r = subprocess.run([str(BIN), "serve", str(tmp_path), "--listen", "127.0.0.1:0"], capture_output=True, text=True,
                       timeout=30, env=env)
    assert r.returncode != 0 and "--password-over-plaintext" in r.stderr, r.stderr
    proc = serve(tmp_path, certs, env=env)
    try:
        client = fl.FlightClient(proc.url, tls_root_certs=certs.read("ca"))
        with pytest.raises(fl.FlightUnauthenticatedError):
            fetch(client)
        token = client.authenticate_basic_token(b"me", b"s3cret")
        assert fetch_with(client, token).num_rows == 20_000
        r = run("get", proc.url.replace("grpc+tls", "grpc"), "t.arrow", "-o", str(tmp_path / "o.arrow"), env=env)
        assert r.returncode != 0 and "in clear" in r.stderr, r.stderr
    finally:
        proc.stop()


def fetch_with(client, header):
    options = fl.FlightCallOptions(headers=[header])
    info = client.get_flight_info(fl.FlightDescriptor.for_path("t.arrow"), options)
    return client.do_get(info.endpoints[0].ticket, options).read_all()


class Tap:
    """A TCP relay on loopback that keeps every byte the server sends back: what anyone
    watching the socket would read."""

    def __init__(self, target):
        self.seen = bytearray()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.target = target
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            conn, _ = self.listener.accept()
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(conn, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, conn, True), daemon=True).start()

    def _pump(self, src, dst, keep):
        try:
            while data := src.recv(1 << 16):
                if keep:
                    self.seen += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            dst.close()


@pytest.mark.parametrize("tls", [False, True], ids=["plaintext", "tls"])
def test_bytes_on_the_wire_are_readable_only_without_tls(tmp_path, certs, tls):
    proc = serve(tmp_path, certs if tls else None, "--planes", "none")
    try:
        host, port = proc.url.split("://")[1].rsplit(":", 1)
        tap = Tap((host, int(port)))
        scheme = "grpc+tls" if tls else "grpc"
        options = {"tls_root_certs": certs.read("ca")} if tls else {}
        client = fl.FlightClient(f"{scheme}://127.0.0.1:{tap.port}", **options)
        assert fetch(client).num_rows == 20_000
        assert len(tap.seen) > 20_000 * len(PATTERN)
        assert (PATTERN in tap.seen) == (not tls)
    finally:
        proc.stop()
