"""`wirespeed serve` as operators run it, checked with their own tools: grpcio's health client,
grpcurl through reflection, promtool on the metrics, and SIGTERM draining calls in flight."""
import json
import signal
import subprocess
import threading
import time
import urllib.request

import grpc
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.flight as flight
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from conftest import ROOT, Proc, free_port, run, table

GRPCURL = ROOT / ".tools" / "bin" / "grpcurl"
FLIGHT = "arrow.flight.protocol.FlightService"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def serve(tmp_path, *args, rows=50_000):
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    feather.write_feather(table(rows=rows), data / "t.arrow", compression="uncompressed")
    proc = Proc(["serve", str(data), "--listen", f"127.0.0.1:{free_port()}", *args])
    proc.dir = data
    proc.addr = proc.url.split("://")[1]
    return proc


def health(addr, service=""):
    with grpc.insecure_channel(addr) as channel:
        request = health_pb2.HealthCheckRequest(service=service)
        return health_pb2_grpc.HealthStub(channel).Check(request, timeout=5).status


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def sample(text, name, **labels):
    """The value of the series `name` whose labels include `labels`; 0 if there is none."""
    want = [f'{k}="{v}"' for k, v in labels.items()]
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(w in line for w in want):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def call_lines(proc):
    return [json.loads(line) for line in proc.output if line.startswith("{")]


def wait_for(condition, within=10.0):
    deadline = time.time() + within
    while not condition():
        assert time.time() < deadline, "timed out"
        time.sleep(0.05)


def test_health_says_serving_to_grpcs_own_client(tmp_path):
    proc = serve(tmp_path)
    try:
        assert health(proc.addr) == SERVING
        assert health(proc.addr, FLIGHT) == SERVING
        with pytest.raises(grpc.RpcError) as e:
            health(proc.addr, "no.such.Service")
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        proc.stop()


def test_health_answers_probes_without_the_password(tmp_path):
    proc = Proc(["serve", str(tmp_path), "--listen", f"127.0.0.1:{free_port()}", "--password-over-plaintext"],
                env={"WIRESPEED_FLIGHT_PASSWORD": "pw"})
    try:
        assert health(proc.url.split("://")[1]) == SERVING
        with pytest.raises(flight.FlightUnauthenticatedError):
            list(flight.connect(proc.url).list_flights())
    finally:
        proc.stop()


def test_grpcurl_lists_describes_and_calls_through_reflection(tmp_path):
    proc = serve(tmp_path)
    try:
        run = lambda *a: subprocess.run([str(GRPCURL), "-plaintext", *a], capture_output=True, text=True,
                                        timeout=60, check=True).stdout
        services = run(proc.addr, "list").split()
        assert FLIGHT in services and "grpc.health.v1.Health" in services
        described = run(proc.addr, "describe", FLIGHT)
        for method in ["ListFlights", "GetFlightInfo", "PollFlightInfo", "DoGet", "DoPut", "DoExchange"]:
            assert f"rpc {method} " in described, described
        flights = [json.loads(f) for f in run("-d", "{}", proc.addr, f"{FLIGHT}/ListFlights").split("\n}\n") if f.strip()
                   for f in [f if f.endswith("}") else f + "}"]]
        assert [f["flightDescriptor"]["path"] for f in flights] == [["t.arrow"]]
        assert flights[0]["totalRecords"] == "50000"
        poll = json.loads(run("-d", '{"type": "PATH", "path": ["t.arrow"]}', proc.addr, f"{FLIGHT}/PollFlightInfo"))
        assert poll["progress"] == 1 and poll["info"]["endpoint"][0]["location"][0]["uri"] == proc.url.replace(
            "grpc://", "grpc+tcp://")
    finally:
        proc.stop()


def test_metrics_count_calls_by_method_plane_and_status_and_pass_promtool(tmp_path):
    port = free_port()
    proc = serve(tmp_path, "--metrics", f"127.0.0.1:{port}")
    try:
        c = flight.connect(proc.url)
        info = c.get_flight_info(flight.FlightDescriptor.for_path("t.arrow"))
        got = c.do_get(info.endpoints[0].ticket).read_all()
        with pytest.raises(KeyError):
            c.get_flight_info(flight.FlightDescriptor.for_path("missing.arrow"))
        # A keyed client's DoGet takes a data plane (shm, on one host): counted there.
        fetched = run("get", proc.url, "t.arrow", "-o", str(tmp_path / "got.arrow"))
        assert fetched.returncode == 0, fetched.stderr
        # Under load: scrapes while calls run.
        errors = []

        def load():
            try:
                for _ in range(5):
                    flight.connect(proc.url).do_get(info.endpoints[0].ticket).read_all()
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=load) for _ in range(4)]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            scrape(port)
        for t in threads:
            t.join()
        assert errors == []
        wait_for(lambda: sample(scrape(port), "wirespeed_flight_active_calls", plane="grpc") == 0)
        text = scrape(port)
        checked = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        calls = "wirespeed_flight_calls_total"
        assert sample(text, calls, method="GetFlightInfo", plane="grpc", code="OK") >= 1
        assert sample(text, calls, method="GetFlightInfo", plane="grpc", code="NOT_FOUND") == 1
        assert sample(text, calls, method="DoGet", plane="grpc", code="OK") == 21
        assert sample(text, calls, method="DoGet", plane="shm", code="OK") == 1
        assert sample(text, "wirespeed_flight_sent_bytes_total", plane="grpc") > 21 * got.nbytes * 0.9
        assert sample(text, "wirespeed_flight_sent_batches_total", plane="shm") >= 1
        assert sample(text, "wirespeed_flight_call_duration_seconds_count", method="DoGet", plane="grpc") == 21
        # OpenMetrics for scrapers that ask for it.
        request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                         headers={"Accept": "application/openmetrics-text"})
        assert urllib.request.urlopen(request, timeout=10).read().decode().endswith("# EOF\n")
    finally:
        proc.stop()


def test_metrics_show_the_cache_and_uploads_in_progress(tmp_path):
    port = free_port()
    proc = serve(tmp_path, "--metrics", f"127.0.0.1:{port}", "--cache-mb", "64")
    try:
        text = scrape(port)
        assert sample(text, "wirespeed_serve_cache_bytes") == 0 and sample(text, "wirespeed_serve_uploads") == 0
        c = flight.connect(proc.url)
        got = c.do_get(c.get_flight_info(flight.FlightDescriptor.for_path("t.arrow")).endpoints[0].ticket).read_all()
        writer, _ = c.do_put(flight.FlightDescriptor.for_path("up.arrow"), table(rows=10).schema)
        writer.write_table(table(rows=10))
        wait_for(lambda: sample(scrape(port), "wirespeed_serve_uploads") == 1)
        text = scrape(port)
        assert sample(text, "wirespeed_serve_cache_tables") == 1
        assert got.nbytes * 0.9 < sample(text, "wirespeed_serve_cache_bytes") <= 64 << 20
        writer.close()
        wait_for(lambda: sample(scrape(port), "wirespeed_serve_uploads") == 0)
        checked = subprocess.run(["promtool", "check", "metrics"], input=scrape(port), capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    finally:
        proc.stop()


def test_auth_failures_and_refusals_are_counted(tmp_path):
    port = free_port()
    proc = Proc(["serve", str(tmp_path), "--listen", f"127.0.0.1:{free_port()}", "--password-over-plaintext",
                 "--metrics", f"127.0.0.1:{port}", "--calls-per-client", "1"],
                env={"WIRESPEED_FLIGHT_PASSWORD": "pw"})
    try:
        c = flight.connect(proc.url)
        with pytest.raises(flight.FlightUnauthenticatedError):
            c.authenticate_basic_token("me", "wrong")
        with pytest.raises(flight.FlightUnauthenticatedError):
            list(c.list_flights())
        text = scrape(port)
        assert sample(text, "wirespeed_flight_auth_failures_total", reason="password") == 1
        assert sample(text, "wirespeed_flight_auth_failures_total", reason="token") == 1
    finally:
        proc.stop()


def test_every_call_is_one_json_line_with_who_what_and_how_it_ended(tmp_path):
    proc = Proc(["serve", str(tmp_path), "--listen", f"127.0.0.1:{free_port()}", "--password-over-plaintext",
                 "--log-format", "json"], env={"WIRESPEED_FLIGHT_PASSWORD": "pw"})
    feather.write_feather(table(rows=1000), tmp_path / "t.arrow")
    try:
        c = flight.connect(proc.url)
        token = c.authenticate_basic_token("alice", "pw")
        options = flight.FlightCallOptions(headers=[token])
        c.do_get(flight.Ticket(b"t.arrow"), options).read_all()
        with pytest.raises(KeyError):
            c.get_flight_info(flight.FlightDescriptor.for_path("nope"), options)
        wait_for(lambda: len(call_lines(proc)) >= 3)
        handshake, get, missing = call_lines(proc)[:3]
        assert (handshake["method"], handshake["identity"], handshake["status"]) == ("Handshake", "alice", "OK")
        assert (get["method"], get["plane"], get["identity"], get["status"]) == ("DoGet", "grpc", "alice", "OK")
        assert get["sent_bytes"] > 1000 and get["sent_batches"] >= 1 and get["duration_s"] > 0
        assert get["peer"].startswith("127.0.0.1:")
        assert (missing["status"], missing["method"]) == ("NOT_FOUND", "GetFlightInfo")
        assert "nope" in missing["message"]
    finally:
        proc.stop()


def paused_reader(url):
    """A DoGet that reads its first batch, then stops reading; returns the reader."""
    reader = flight.connect(url).do_get(flight.Ticket(b"t.arrow"))
    reader.read_chunk()
    return reader


def test_sigterm_drains_calls_in_flight_then_exits_0(tmp_path):
    # More than gRPC's windows and buffers hold, so the call stays open while its reader pauses.
    proc = serve(tmp_path, "--drain-timeout", "20", rows=6_000_000)
    try:
        reader = paused_reader(proc.url)
        proc.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: health(proc.addr) == NOT_SERVING)
        with pytest.raises(flight.FlightUnavailableError, match="shutting down"):
            flight.connect(proc.url).get_flight_info(flight.FlightDescriptor.for_path("t.arrow"))
        time.sleep(0.5)
        assert proc.proc.poll() is None, "the server waits for the call in flight"
        assert reader.read_all().num_rows > 0
        assert proc.proc.wait(timeout=30) == 0
        assert any("stopped (0 calls cancelled" in line for line in proc.output), proc.output
    finally:
        proc.stop()


def test_past_the_drain_timeout_calls_are_cancelled_and_uploads_leave_nothing(tmp_path):
    proc = serve(tmp_path, "--drain-timeout", "1", rows=2_000_000)
    try:
        reader = paused_reader(proc.url)
        writer, _ = flight.connect(proc.url).do_put(flight.FlightDescriptor.for_path("up.arrow"),
                                                     table(rows=10).schema)
        writer.write_table(table(rows=10))
        proc.proc.send_signal(signal.SIGTERM)
        assert proc.proc.wait(timeout=20) == 0
        assert any("stopped (2 calls cancelled" in line for line in proc.output), proc.output
        with pytest.raises(flight.FlightError):
            reader.read_all()
        assert sorted(p.name for p in proc.dir.iterdir()) == ["t.arrow"], "the cut upload left nothing"
    finally:
        proc.stop()


def test_a_second_sigterm_stops_at_once(tmp_path):
    proc = serve(tmp_path, "--drain-timeout", "60", rows=2_000_000)
    try:
        reader = paused_reader(proc.url)
        proc.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: health(proc.addr) == NOT_SERVING)
        started = time.time()
        proc.proc.send_signal(signal.SIGTERM)
        assert proc.proc.wait(timeout=10) == -signal.SIGTERM
        assert time.time() - started < 5
    finally:
        proc.stop()
