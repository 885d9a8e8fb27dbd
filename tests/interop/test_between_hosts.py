"""Flight between hosts: `serve` on host A of three network-namespace hosts (tests/hosts.py),
listening on 0.0.0.0, and on host B `wirespeed get` with the key, pyarrow.flight and arrow-go's
client. Each reads the same table; a keyed `get` takes a plane that crosses hosts (never shm);
the tcp plane under TLS carries no payload in the clear on the bridge, where the plaintext
plane does; and links that go down, hosts that freeze or vanish, mid-transfer.
wirespeed.flight between hosts is in python/tests/test_between_hosts.py."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.feather as feather
import pytest

import tls_certs
from conftest import BIN, KEY, ROOT, Proc, table
from wirespeed_proc import serve_on as serve_host

sys.path.insert(0, str(ROOT / "tests"))
import hosts as netns  # noqa: E402

MARKER = "wirespeed-marker-5b0d2c"
A, B, C = 0, 1, 2


hosts = netns.module_fixture(3)


def marked(rows=40_000):
    """A table whose every string carries MARKER, so a capture shows whether payload went in clear."""
    return pa.table({"a": pa.array(range(rows), pa.int64()), "s": pa.array([f"{MARKER} {i}" for i in range(rows)])})


def serve_on(hosts, i, data, *args, env=None):
    return serve_host(Proc, hosts, i, data, *args, env=env)


def get_on(hosts, i, url, path, out, *args, env=None, timeout=120):
    return hosts.run(i, BIN, "get", url, path, "-o", out, *args, env={"WIRESPEED_KEY": KEY, **(env or {})},
                     timeout=timeout)


READ = """
import sys, json, pyarrow.feather as feather, pyarrow.flight as fl
url, path, out = sys.argv[1:4]
client = fl.connect(url)
info = client.get_flight_info(fl.FlightDescriptor.for_path(path))
feather.write_feather(client.do_get(info.endpoints[0].ticket).read_all(), out, compression="uncompressed")
print(json.dumps([l.uri.decode() for e in info.endpoints for l in e.locations]))
"""


@pytest.fixture(scope="module")
def served(hosts, tmp_path_factory):
    data = tmp_path_factory.mktemp("hosts") / "data"
    data.mkdir()
    feather.write_feather(table(60_000, seed=7), data / "t.arrow", compression="uncompressed")
    proc = serve_on(hosts, A, data, "--planes", "shm,ucx,tcp,ofi+tcp")
    yield proc
    proc.stop()


def test_clients_on_another_host_read_the_table(hosts, served, tmp_path):
    want = feather.read_table(served.dir / "t.arrow")
    url = served.remote_url
    r = hosts.run(B, sys.executable, "-c", READ, url, "t.arrow", tmp_path / "pyarrow.arrow")
    assert r.returncode == 0, r.stderr
    assert feather.read_table(tmp_path / "pyarrow.arrow").equals(want)
    # The server listens on 0.0.0.0, and announces where host B reached it.
    assert json.loads(r.stdout) == [url.replace("grpc://", "grpc+tcp://")]
    for transport in ("auto", "tcp", "ucx", "ofi+tcp", "grpc"):
        out = tmp_path / f"{transport}.arrow"
        r = get_on(hosts, B, url, "t.arrow", out, "--transport", transport, "-v")
        assert r.returncode == 0, r.stderr
        said = re.search(r" over (\S+) in ", r.stderr)
        assert said, r.stderr
        # The key's client takes a plane that crosses hosts, whichever the server offers.
        assert said[1] == transport or (transport == "auto" and said[1] in ("tcp", "ucx", "ofi+tcp")), r.stderr
        assert feather.read_table(out).equals(want)


def test_shm_is_refused_across_hosts_in_one_line(hosts, served, tmp_path):
    r = get_on(hosts, B, served.remote_url, "t.arrow", tmp_path / "x.arrow", "--transport", "shm")
    assert r.returncode != 0
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    # Never offered across hosts: the message says which are.
    assert "shm is for clients on the server's own host; it offers ucx, tcp, ofi+tcp" in r.stderr, r.stderr
    assert not any(tmp_path.iterdir())


def test_arrow_go_on_another_host_lists_gets_and_puts(hosts, goflight, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    feather.write_feather(table(10_000), data / "t.arrow", compression="uncompressed")
    proc = serve_on(hosts, A, data)
    try:
        r = hosts.run(B, goflight, proc.remote_url.split("://", 1)[1], "", "")
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        assert got["flights"] == ["t.arrow"]
        assert (got["rows"], got["sum"]) == (10_000, sum(range(10_000)))
        assert got["put_rows"] == 3000
        assert feather.read_table(data / "fromgo.arrow").column("x").to_pylist() == list(range(3000))
    finally:
        proc.stop()


def capture(hosts, i, run):
    """The bytes host i's link carried while `run()` ran, captured on the bridge's side of it."""
    veth = hosts.state["hosts"][i]["veth"]
    pcap = f"/tmp/wirespeed-capture-{os.getpid()}-{i}.pcap"
    dump = subprocess.Popen(["tcpdump", "-i", veth, "-s", "0", "-U", "-w", pcap, "tcp"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        # tcpdump says "listening on" once it captures.
        deadline = time.time() + 10
        while b"listening on" not in dump.stderr.read1(4096) and time.time() < deadline:
            pass
        run()
        time.sleep(1)  # for the last packets to reach the file
    finally:
        dump.send_signal(signal.SIGINT)
        dump.wait()
    with open(pcap, "rb") as f:
        data = f.read()
    os.unlink(pcap)
    return data


def test_the_tcp_plane_under_tls_is_sealed_on_the_bridge(hosts, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    feather.write_feather(marked(), data / "m.arrow", compression="uncompressed")
    certs = tls_certs.make(tmp_path / "certs", ips=(hosts.addr(A),))
    sealed = serve_on(hosts, A, data, "--tls-cert", certs.server_cert, "--tls-key", certs.server_key)
    clear = serve_on(hosts, A, data)
    try:
        for proc, wants_marker in ((sealed, False), (clear, True)):
            out = tmp_path / f"m-{wants_marker}.arrow"

            def get():
                tls = ["--tls-roots", str(certs.ca)] if proc is sealed else []
                r = get_on(hosts, B, proc.remote_url, "m.arrow", out, "--transport", "tcp", *tls)
                assert r.returncode == 0, r.stderr

            wire = capture(hosts, B, get)
            assert feather.read_table(out).equals(marked())
            assert len(wire) > marked().nbytes / 2, "the capture holds the transfer"
            assert (MARKER.encode() in wire) == wants_marker
    finally:
        sealed.stop()
        clear.stop()


# Faults between hosts. Both ends find a dead peer after WIRESPEED_PEER_TIMEOUT seconds
# (keepalive probes and unacknowledged bytes, Config::peer_timeout); A's link is capped so that
# a transfer of BIG takes about 4 s and the fault comes mid-transfer.
PEER_TIMEOUT = 6
BIG_ROWS = 6_000_000


@pytest.fixture(scope="module")
def slow(hosts, tmp_path_factory):
    """`serve` on host A with a 100 Mbit/s link and a 48 MB flight, big.arrow."""
    data = tmp_path_factory.mktemp("slow") / "data"
    data.mkdir()
    feather.write_feather(pa.table({"x": pa.array(range(BIG_ROWS), pa.int64())}), data / "big.arrow",
                          compression="uncompressed")
    feather.write_feather(table(10_000), data / "small.arrow", compression="uncompressed")
    hosts.rate(A, "100mbit")
    proc = serve_on(hosts, A, data, env={"WIRESPEED_PEER_TIMEOUT": str(PEER_TIMEOUT)})
    yield proc
    proc.stop()


def start_get(hosts, i, proc, out, transport, peer_timeout=PEER_TIMEOUT):
    return subprocess.Popen(hosts.exec_args(i, BIN, "get", proc.remote_url, "big.arrow", "-o", out, "--transport",
                                            transport),
                            env={**os.environ, "WIRESPEED_KEY": KEY, "WIRESPEED_PEER_TIMEOUT": str(peer_timeout)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_until_receiving(hosts, i, get, at_least=2_000_000):
    """Until host i has received `at_least` bytes more while `get` runs."""
    before = hosts.received(i)
    deadline = time.time() + 20
    while hosts.received(i) - before < at_least:
        assert get.poll() is None, f"get ended early: {get.stderr.read()}"
        assert time.time() < deadline, "the transfer did not start"
        time.sleep(0.05)


def test_small_reads_work_from_every_host(hosts, slow, tmp_path):
    for i in (B, C):
        r = get_on(hosts, i, slow.remote_url, "small.arrow", tmp_path / f"{i}.arrow")
        assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("transport", ["tcp", "ucx"])
def test_a_link_down_mid_get_fails_within_the_peer_timeout(hosts, slow, tmp_path, transport):
    out = tmp_path / "big.arrow"
    get = start_get(hosts, B, slow, out, transport)
    try:
        wait_until_receiving(hosts, B, get)
        hosts.link(B, "down")
        down = time.time()
        _, err = get.communicate(timeout=PEER_TIMEOUT * 4)
        took = time.time() - down
    finally:
        get.kill()
        hosts.link(B, "up")
    assert get.returncode != 0
    assert len(err.strip().splitlines()) == 1, err
    assert took < PEER_TIMEOUT * 3, f"{took:.1f} s: {err}"
    assert not out.exists() and not any(tmp_path.iterdir()), "nothing half-written is left"
    # The server goes on serving the others.
    r = get_on(hosts, C, slow.remote_url, "small.arrow", tmp_path / "c.arrow")
    assert r.returncode == 0, r.stderr


def test_a_link_back_within_the_peer_timeout_loses_nothing(hosts, slow, tmp_path):
    out = tmp_path / "big.arrow"
    get = start_get(hosts, B, slow, out, "tcp")
    try:
        wait_until_receiving(hosts, B, get)
        hosts.link(B, "down")
        time.sleep(PEER_TIMEOUT / 3)
        hosts.link(B, "up")
        _, err = get.communicate(timeout=120)
    finally:
        get.kill()
        hosts.link(B, "up")
    assert get.returncode == 0, err
    assert feather.read_table(out).column("x").equals(feather.read_table(slow.dir / "big.arrow").column("x"))


def test_a_frozen_server_host_resumed_is_slow_not_dead(hosts, slow, tmp_path):
    """Frozen for longer than the peer timeout, the server's kernel still answers: the
    transfer waits, and goes on when the host is thawed."""
    out = tmp_path / "big.arrow"
    get = start_get(hosts, B, slow, out, "tcp", peer_timeout=2)
    try:
        wait_until_receiving(hosts, B, get)
        hosts.freeze(A)
        time.sleep(5)
        assert get.poll() is None, "a frozen peer is not a dead one"
        assert not out.exists(), "nothing half-written looks complete"
        hosts.thaw(A)
        _, err = get.communicate(timeout=120)
    finally:
        hosts.thaw(A)
        get.kill()
    assert get.returncode == 0, err
    assert feather.read_table(out).num_rows == BIG_ROWS


def test_a_vanished_server_host_ends_every_wait(hosts, tmp_path):
    """Host C, with its server, is deleted mid-transfer (the last test: C is gone after it)."""
    data = tmp_path / "data"
    data.mkdir()
    feather.write_feather(pa.table({"x": pa.array(range(BIG_ROWS), pa.int64())}), data / "big.arrow",
                          compression="uncompressed")
    hosts.rate(C, "100mbit")
    proc = serve_on(hosts, C, data, env={"WIRESPEED_PEER_TIMEOUT": str(PEER_TIMEOUT)})
    out = tmp_path / "big-copy.arrow"
    get = start_get(hosts, B, proc, out, "tcp")
    try:
        wait_until_receiving(hosts, B, get)
        hosts.vanish(C)
        gone = time.time()
        _, err = get.communicate(timeout=PEER_TIMEOUT * 4)
    finally:
        get.kill()
        proc.stop()
    assert get.returncode != 0 and len(err.strip().splitlines()) == 1, err
    assert time.time() - gone < PEER_TIMEOUT * 3
    assert not out.exists()
