"""`wirespeed serve` under load and attack, as a wary operator tries it before production: racing
uploads, paused and piling-up clients, unauthenticated oversized requests, silent sockets on
every plane, signals; with pyarrow.flight and raw sockets as the other side."""
import json
import os
import signal
import socket
import subprocess
import threading
import time
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.flight as flight
import pytest

from conftest import Proc, free_port, hello, run, table


def path(name):
    return flight.FlightDescriptor.for_path(name)


def peak_rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def serve(tmp_path, files=None, args=(), env=None):
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    for name, t in (files or {}).items():
        feather.write_feather(t, data / name, compression="uncompressed")
    proc = Proc(["serve", str(data), "--listen", f"127.0.0.1:{free_port()}", *args], env=env)
    proc.dir = data
    return proc


def big_table(mb):
    rows = mb * (1 << 20) // 8
    return pa.table({"x": pa.array(range(rows), pa.int64())})


def test_concurrent_uploads_to_one_name_never_mix(tmp_path):
    proc = serve(tmp_path)
    try:
        for round_ in range(5):
            tables = [table(rows=60_000, seed=1_000_000 * i) for i in range(4)]
            answers = [None] * len(tables)
            start = threading.Barrier(len(tables))

            def upload(i):
                c = flight.connect(proc.url)
                writer, reader = c.do_put(path("race.arrow"), tables[i].schema)
                start.wait()
                writer.write_table(tables[i], max_chunksize=1000)
                writer.done_writing()
                answers[i] = json.loads(reader.read().to_pybytes())
                writer.close()

            threads = [threading.Thread(target=upload, args=(i,)) for i in range(len(tables))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert all(a == {"path": "race.arrow", "rows": 60_000} for a in answers), answers
            got = feather.read_table(proc.dir / "race.arrow")
            assert any(got.equals(t) for t in tables), f"round {round_}: the file holds no one upload whole"
            assert [p.name for p in proc.dir.iterdir()] == ["race.arrow"], list(proc.dir.iterdir())
    finally:
        proc.stop()


def test_a_lock_step_upload_gets_each_batch_echoed(tmp_path):
    """Write a batch with metadata, wait for its echo, then the next (Arrow's own examples)."""
    proc = serve(tmp_path)
    try:
        c = flight.connect(proc.url)
        t = table(rows=10_000)
        options = flight.FlightCallOptions(timeout=30)
        writer, reader = c.do_put(path("lockstep.arrow"), t.schema, options=options)
        for i, batch in enumerate(t.to_batches(max_chunksize=1000)):
            writer.write_with_metadata(batch, pa.py_buffer(f"batch {i}".encode()))
            assert reader.read().to_pybytes() == f"batch {i}".encode()
        writer.done_writing()
        assert json.loads(reader.read().to_pybytes()) == {"path": "lockstep.arrow", "rows": 10_000}
        writer.close()
        assert feather.read_table(proc.dir / "lockstep.arrow").equals(t)
    finally:
        proc.stop()


def test_paused_downloads_leave_the_service_to_others(tmp_path):
    """Ten times more stalled DoGets than handler threads: everything else still answers."""
    t = big_table(32)
    proc = serve(tmp_path, {"big.arrow": t}, ["--handler-threads", "4"])
    try:
        stalled = flight.connect(proc.url)
        ticket = stalled.get_flight_info(path("big.arrow")).endpoints[0].ticket
        readers = [stalled.do_get(ticket) for _ in range(40)]
        for r in readers[:5]:
            r.read_chunk()  # started, then left unread
        c = flight.connect(proc.url)
        options = flight.FlightCallOptions(timeout=10)
        assert [i.descriptor.path for i in c.list_flights(options=options)] == [[b"big.arrow"]]
        assert c.do_get(ticket, options=options).read_all().equals(t)
        for transport in ["shm", "tcp", "grpc"]:
            r = run("get", proc.url, "big.arrow", "-o", str(tmp_path / f"{transport}.arrow"), "--transport", transport,
                    timeout=30)
            assert r.returncode == 0, r.stderr
        del readers
        stalled.close()
    finally:
        proc.stop()


def test_exchanges_that_never_begin_hold_no_handler_thread(tmp_path):
    """`serve` has no DoExchange: each is refused at once, before its client begins, so paused
    clients hold nothing (a service with exchanges gives them at most half its handler
    threads: crates/wirespeed-flight/tests/connections.rs)."""
    t = table(1000)
    proc = serve(tmp_path, {"t.arrow": t}, ["--handler-threads", "4"])
    try:
        c = flight.connect(proc.url)
        paused = [c.do_exchange(path("x")) for _ in range(2)]  # no schema sent
        time.sleep(0.5)
        paused.append(c.do_exchange(path("x")))  # a third: two would be the bound
        for _, reader in paused:
            with pytest.raises(pa.ArrowNotImplementedError):
                reader.read_chunk()
        options = flight.FlightCallOptions(timeout=10)
        assert len(list(c.list_flights(options=options))) == 1
        ticket = c.get_flight_info(path("t.arrow"), options=options).endpoints[0].ticket
        assert c.do_get(ticket, options=options).read_all().equals(t)
        del paused
    finally:
        proc.stop()


def test_one_client_cannot_hold_every_call(tmp_path):
    proc = serve(tmp_path, {"t.arrow": big_table(16)}, ["--calls-per-client", "8"])
    try:
        hog = flight.connect(proc.url)
        ticket = hog.get_flight_info(path("t.arrow")).endpoints[0].ticket
        readers = [hog.do_get(ticket) for _ in range(8)]
        # pyarrow reports RESOURCE_EXHAUSTED as ArrowInvalid.
        with pytest.raises(pa.ArrowInvalid, match="too many calls open"):
            hog.do_get(ticket).read_all()
        for r in readers:
            r.cancel()
        del readers
        deadline = time.time() + 10
        while True:
            try:
                assert hog.do_get(ticket).read_all().num_rows == 16 * (1 << 20) // 8
                break
            except pa.ArrowInvalid:
                assert time.time() < deadline, "calls stayed counted after their clients cancelled"
                time.sleep(0.1)
    finally:
        proc.stop()


def test_unauthenticated_requests_are_refused_before_their_bodies_are_read(tmp_path):
    proc = serve(tmp_path, {"t.arrow": table(100)}, args=["--password-over-plaintext"],
                 env={"WIRESPEED_FLIGHT_PASSWORD": "s3cret"})
    try:
        before = peak_rss_mb(proc.proc.pid)
        c = flight.connect(proc.url)
        with pytest.raises(flight.FlightUnauthenticatedError):
            c.get_flight_info(flight.FlightDescriptor.for_command(b"x" * (200 << 20)))
        huge = big_table(256)
        with pytest.raises(flight.FlightError):
            writer, _ = c.do_put(path("huge.arrow"), huge.schema)
            writer.write_table(huge)
            writer.close()
        grown = peak_rss_mb(proc.proc.pid) - before
        assert grown < 64, f"the server grew by {grown:.0f} MB for requests it refused"
        # Still serving those who log in.
        header = c.authenticate_basic_token("me", "s3cret")
        assert len(list(c.list_flights(options=flight.FlightCallOptions(headers=[header])))) == 1
    finally:
        proc.stop()


def test_an_oversized_control_request_is_refused_on_an_open_server(tmp_path):
    proc = serve(tmp_path, {"t.arrow": table(100)})
    try:
        before = peak_rss_mb(proc.proc.pid)
        c = flight.connect(proc.url)
        with pytest.raises(pa.ArrowInvalid, match="message length too large"):
            c.get_flight_info(flight.FlightDescriptor.for_command(b"x" * (200 << 20)))
        grown = peak_rss_mb(proc.proc.pid) - before
        assert grown < 64, f"the server grew by {grown:.0f} MB for a refused descriptor"
        assert len(list(c.list_flights())) == 1
    finally:
        proc.stop()


def test_forged_tickets_paths_and_headers_of_64_kib_get_their_own_status(tmp_path):
    """A peer's ticket, path or header is quoted in a few hundred bytes at most, so that gRPC
    C++ (pyarrow's client) gets the status itself and not one about the message's size."""
    proc = serve(tmp_path, {"t.arrow": table(100)})
    big = "x" * (64 << 10)
    schema = pa.schema([("a", pa.int64())])
    try:
        c = flight.connect(proc.url)
        for call in (lambda: c.do_get(flight.Ticket(big.encode())).read_all(),
                     lambda: c.get_flight_info(path(big + ".arrow")),
                     lambda: c.get_schema(path(big))):
            with pytest.raises(pa.ArrowKeyError, match="no flight") as e:
                call()
            assert len(str(e.value)) < 2000
        with pytest.raises(pa.ArrowInvalid, match="longer than a file") as e:
            writer, _ = c.do_put(path(big + ".arrow"), schema)
            writer.close()
        with pytest.raises(pa.ArrowNotImplementedError, match="unknown action"):
            list(c.do_action(flight.Action(big, b"")))
        headers = flight.FlightCallOptions(headers=[(b"x-big", big.encode())])
        with pytest.raises(pa.ArrowInvalid, match="resource exhausted.*request metadata of"):
            c.get_flight_info(path("t.arrow"), headers)
        assert c.get_flight_info(path("t.arrow")).total_records == 100
    finally:
        proc.stop()


def test_uploads_share_one_memory_bound_on_an_open_server(tmp_path):
    proc = serve(tmp_path, args=["--request-memory-mb", "96"])
    try:
        before = peak_rss_mb(proc.proc.pid)
        c = flight.connect(proc.url)
        with pytest.raises(pa.ArrowInvalid, match="more than this server holds"):
            huge = big_table(128)
            writer, _ = c.do_put(path("huge.arrow"), huge.schema)
            writer.write_table(huge)  # one 128 MB batch
            writer.close()
        grown = peak_rss_mb(proc.proc.pid) - before
        assert grown < 64, f"the server grew by {grown:.0f} MB for a batch past its bound"
        # Four uploads of 32 MB batches at once: three fit, the fourth waits its turn.
        t = big_table(64)
        errors = []

        def upload(i):
            try:
                writer, _ = flight.connect(proc.url).do_put(path(f"u{i}.arrow"), t.schema)
                writer.write_table(t, max_chunksize=t.num_rows // 2)
                writer.close()
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=upload, args=(i,)) for i in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert errors == []
        for i in range(4):
            assert feather.read_table(proc.dir / f"u{i}.arrow").equals(t)
    finally:
        proc.stop()


def test_failed_logins_are_slowed_down_and_the_right_password_always_gets_in(tmp_path):
    proc = serve(tmp_path, args=["--password-over-plaintext"], env={"WIRESPEED_FLIGHT_PASSWORD": "s3cret"})
    try:
        c = flight.connect(proc.url)
        # One typo keeps no one out.
        with pytest.raises(flight.FlightUnauthenticatedError):
            c.authenticate_basic_token("me", "typo")
        c.authenticate_basic_token("me", "s3cret")
        # Guesses past the free ones (5 in a row) are answered one per cool-down (1 s, then 2 s):
        # 7 guesses take at least 3 s, however they are sent.
        started = time.time()
        for _ in range(7):
            with pytest.raises(flight.FlightUnauthenticatedError):
                c.authenticate_basic_token("me", "guess")
        assert time.time() - started >= 2.9
        # Meanwhile the right password from the same address gets in at once.
        started = time.time()
        c.authenticate_basic_token("me", "s3cret")
        assert time.time() - started < 3
    finally:
        proc.stop()


def plane_addresses(url):
    c = flight.connect(url)
    options = flight.FlightCallOptions(headers=[hello()])
    out = {}
    for result in c.do_action(flight.Action("wirespeed.get", b"t.arrow"), options):
        uri = result.body.to_pybytes().decode()
        if uri.startswith("wirespeed+"):
            u = urlparse(uri[len("wirespeed+"):])
            out[u.scheme] = u.netloc if u.scheme != "shm" else u.netloc + u.path
    return out


def silent_socket(scheme, address):
    if scheme == "shm":
        s = socket.socket(socket.AF_UNIX)
        s.connect("\0" + address[1:] if address.startswith("@") else address)
    else:
        host, port = address.rsplit(":", 1)
        s = socket.create_connection((host, int(port)))
    return s


def test_silent_sockets_on_every_plane_keep_no_client_out(tmp_path):
    t = table(20_000)
    proc = serve(tmp_path, {"t.arrow": t})
    try:
        planes = plane_addresses(proc.url)
        assert set(planes) == {"shm", "tcp", "ucx"}, planes
        grpc_host, grpc_port = proc.url[len("grpc://"):].rsplit(":", 1)
        silent = [socket.create_connection((grpc_host, int(grpc_port))) for _ in range(100)]
        for scheme, address in planes.items():
            silent += [silent_socket(scheme, address) for _ in range(150)]
        for scheme in planes:
            out = tmp_path / f"{scheme}.arrow"
            r = run("get", proc.url, "t.arrow", "-o", str(out), "--transport", scheme, "-v", timeout=60)
            assert r.returncode == 0 and f"over {scheme}" in r.stderr, r.stderr
            assert feather.read_table(out).equals(t)
        for s in silent:
            s.close()
    finally:
        proc.stop()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_no_socket_file_is_left_behind(tmp_path, sig):
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    env = {"TMPDIR": str(runtime), "XDG_RUNTIME_DIR": str(runtime)}
    proc = serve(tmp_path, {"t.arrow": table(100)}, env=env)
    assert "shm" in plane_addresses(proc.url)
    proc.proc.send_signal(sig)
    proc.proc.wait(timeout=10)
    assert list(runtime.iterdir()) == []
    # SIGTERM and SIGINT drain (nothing is in flight here), then exit 0.
    assert proc.proc.returncode == (-sig if sig == signal.SIGKILL else 0), proc.proc.returncode


class SlowServer(flight.FlightServerBase):
    """A pyarrow server that streams a table slowly, so a download can be cut short."""

    def __init__(self, location, t):
        super().__init__(location)
        self.t = t

    def get_flight_info(self, context, descriptor):
        return flight.FlightInfo(self.t.schema, descriptor, [flight.FlightEndpoint(b"t", [])], self.t.num_rows, -1)

    def do_get(self, context, ticket):
        def batches():
            for b in self.t.to_batches(max_chunksize=1000):
                time.sleep(0.05)
                yield b
        return flight.GeneratorStream(self.t.schema, batches())


@pytest.fixture
def slow_server():
    port = free_port()
    # No dictionaries: pyarrow's GeneratorStream cannot send them (its own client refuses it).
    server = SlowServer(f"grpc://127.0.0.1:{port}", table(rows=200_000).drop_columns(["d"]))
    threading.Thread(target=server.serve, daemon=True).start()
    yield f"grpc://127.0.0.1:{port}"
    server.shutdown()


def start_get(url, out):
    from conftest import BIN
    # SIGINT at its default, as in a terminal (a shell's background job starts with it ignored).
    proc = subprocess.Popen([str(BIN), "get", url, "t", "-o", str(out)], stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    part = out.with_name(f".{out.name}.wirespeed-part")
    deadline = time.time() + 20
    while not part.exists():
        assert time.time() < deadline and proc.poll() is None, "the download never started"
        time.sleep(0.01)
    time.sleep(0.2)
    return proc, part


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_get_leaves_nothing(slow_server, tmp_path, sig):
    out = tmp_path / "out.arrow"
    proc, part = start_get(slow_server, out)
    proc.send_signal(sig)
    proc.wait(timeout=10)
    assert proc.returncode == -sig, proc.stderr.read()
    assert list(tmp_path.iterdir()) == []


def test_a_killed_gets_part_is_replaced_by_the_next(slow_server, tmp_path):
    out = tmp_path / "out.arrow"
    proc, part = start_get(slow_server, out)
    proc.kill()
    proc.wait()
    assert part.exists()
    r = run("get", slow_server, "t", "-o", str(out), timeout=120)
    assert r.returncode == 0, r.stderr
    assert feather.read_table(out).num_rows == 200_000
    assert [p.name for p in tmp_path.iterdir()] == ["out.arrow"]


def test_a_second_get_to_the_same_file_is_refused_while_the_first_runs(slow_server, tmp_path):
    out = tmp_path / "out.arrow"
    proc, part = start_get(slow_server, out)
    try:
        r = run("get", slow_server, "t", "-o", str(out), timeout=30)
        assert r.returncode != 0 and "another writer" in r.stderr, r.stderr
    finally:
        proc.kill()
        proc.wait()


def rss_now_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))


def test_memory_goes_back_after_a_burst(tmp_path):
    t = big_table(64)
    proc = serve(tmp_path, {"t.arrow": t})
    try:
        c = flight.connect(proc.url)
        ticket = c.get_flight_info(path("t.arrow")).endpoints[0].ticket
        baseline = rss_now_mb(proc.proc.pid)
        rows = []

        def read():
            rows.append(flight.connect(proc.url).do_get(ticket).read_all().num_rows)

        threads = [threading.Thread(target=read) for _ in range(16)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert rows == [t.num_rows] * 16
        peak = peak_rss_mb(proc.proc.pid)
        assert peak > baseline + 64, f"the burst did not load the server ({baseline:.0f} -> {peak:.0f} MB)"
        deadline = time.time() + 10
        while (now := rss_now_mb(proc.proc.pid)) > baseline + (peak - baseline) / 2:
            assert time.time() < deadline, f"RSS stayed at {now:.0f} MB after {baseline:.0f} -> {peak:.0f} MB"
            time.sleep(0.2)
    finally:
        proc.stop()


def test_a_password_needs_tls_except_on_a_unix_socket(tmp_path):
    """The library decides where a password may travel, and the CLI follows it: a Unix
    socket's bytes never leave the host, so `serve` takes a password there without TLS."""
    data = tmp_path / "data"
    data.mkdir()
    feather.write_feather(table(100), data / "t.arrow", compression="uncompressed")
    env = {"WIRESPEED_FLIGHT_PASSWORD": "s3cret"}
    refused = run("serve", str(data), "--listen", f"127.0.0.1:{free_port()}", env=env, timeout=30)
    assert refused.returncode == 2 and "in clear" in refused.stderr, refused.stderr
    url = f"grpc+unix://{tmp_path / 'flight.sock'}"
    proc = Proc(["serve", str(data), "--listen", url], env=env, pattern=r"grpc\+unix://\S+")
    try:
        c = flight.connect(url, generic_options=[("grpc.default_authority", "localhost")])
        with pytest.raises(flight.FlightUnauthenticatedError):
            c.get_flight_info(flight.FlightDescriptor.for_path("t.arrow"))
        options = flight.FlightCallOptions(headers=[c.authenticate_basic_token("me", "s3cret")])
        assert c.get_flight_info(flight.FlightDescriptor.for_path("t.arrow"), options).total_records == 100
    finally:
        proc.stop()
