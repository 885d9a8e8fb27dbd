"""wirespeed.flight between hosts: `serve` on host A of network-namespace hosts (tests/hosts.py),
a keyed wirespeed.flight client on host B. It reads over a plane that crosses hosts (never
shm), is refused shm in one clear error, uploads whole over every plane, and sees a link that
goes down mid-read as a Flight error within the peer timeout."""
import os
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.feather as feather
import pytest

from conftest import KEY, ROOT, WirespeedProc, table
from wirespeed_proc import serve_on

sys.path.insert(0, str(ROOT / "tests"))
import hosts as netns  # noqa: E402

A, B = 0, 1
PEER_TIMEOUT = 6


class Proc(WirespeedProc):
    key = KEY


hosts = netns.module_fixture(2)


@pytest.fixture(scope="module")
def served(hosts, tmp_path_factory):
    data = tmp_path_factory.mktemp("hosts") / "data"
    data.mkdir()
    feather.write_feather(table(60_000, seed=3), data / "t.arrow", compression="uncompressed")
    feather.write_feather(pa.table({"x": pa.array(range(6_000_000), pa.int64())}), data / "big.arrow",
                          compression="uncompressed")
    proc = serve_on(Proc, hosts, A, data, "--planes", "shm,ucx,tcp,ofi+tcp",
                    env={"WIRESPEED_PEER_TIMEOUT": str(PEER_TIMEOUT)})
    yield proc
    proc.stop()


def on_b(hosts, code, *args, timeout=120):
    return hosts.run(B, sys.executable, "-c", code, *args, env={"WIRESPEED_PEER_TIMEOUT": str(PEER_TIMEOUT)},
                     timeout=timeout)


READ = """
import sys, pyarrow.feather as feather, wirespeed.flight as fl
url, key, transport, out = sys.argv[1:5]
client = fl.FlightClient(url, key=key, transport=transport)
info = client.get_flight_info(fl.FlightDescriptor.for_path("t.arrow"))
reader = client.do_get(info.endpoints[0].ticket)
feather.write_feather(reader.read_all(), out, compression="uncompressed")
print(reader.plane)
"""


@pytest.mark.parametrize("transport", ["auto", "tcp", "ucx", "ofi+tcp"])
def test_a_keyed_client_on_another_host_reads_over_a_plane_that_crosses(hosts, served, tmp_path, transport):
    out = tmp_path / "t.arrow"
    r = on_b(hosts, READ, served.remote_url, KEY, transport, out)
    assert r.returncode == 0, r.stderr
    plane = r.stdout.split()[-1]
    assert plane == transport or (transport == "auto" and plane in ("tcp", "ucx", "ofi+tcp")), plane
    assert feather.read_table(out).equals(feather.read_table(served.dir / "t.arrow"))


def test_shm_across_hosts_is_a_clear_error(hosts, served, tmp_path):
    r = on_b(hosts, READ, served.remote_url, KEY, "shm", tmp_path / "t.arrow")
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode != 0 and "FlightUnavailableError" in last and "shm" in last, r.stderr
    assert not (tmp_path / "t.arrow").exists()


PUT = """
import sys, pyarrow as pa, wirespeed.flight as fl
url, key, transport, name = sys.argv[1:5]
client = fl.FlightClient(url, key=key, transport=transport)
t = pa.table({"x": pa.array(range(200_000), pa.int64()), "s": pa.array([f"up {i}" for i in range(200_000)])})
writer, _ = client.do_put(fl.FlightDescriptor.for_path(name), t.schema)
writer.write_table(t, max_chunksize=10_000)
writer.close()
print(getattr(writer, "plane", "grpc"))
"""


@pytest.mark.parametrize("transport", ["tcp", "ucx", "grpc"])
def test_uploads_from_another_host_land_whole(hosts, served, transport):
    name = f"from-b-{transport}.arrow"
    r = on_b(hosts, PUT, served.remote_url, KEY, transport, name)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-1] == transport
    t = feather.read_table(served.dir / name)
    assert t.column("x").to_pylist() == list(range(200_000))
    assert t.column("s")[199_999].as_py() == "up 199999"


def test_a_link_down_mid_read_is_a_flight_error_within_the_peer_timeout(hosts, served):
    code = """
import sys, time, wirespeed.flight as fl
client = fl.FlightClient(sys.argv[1], key=sys.argv[2], transport="tcp")
reader = client.do_get(fl.Ticket(b"big.arrow"))
reader.read_chunk()
print("reading", flush=True)
start = time.time()
try:
    reader.read_all()
    print("whole")
except fl.FlightError as e:
    print(type(e).__name__, round(time.time() - start, 1), e)
"""
    hosts.rate(A, "100mbit")
    p = subprocess.Popen(hosts.exec_args(B, sys.executable, "-c", code, served.remote_url, KEY), text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**os.environ, "WIRESPEED_PEER_TIMEOUT": str(PEER_TIMEOUT)})
    try:
        assert p.stdout.readline().strip() == "reading", p.stderr.read()
        time.sleep(0.5)
        hosts.link(B, "down")
        out, err = p.communicate(timeout=PEER_TIMEOUT * 4)
    finally:
        p.kill()
        hosts.link(B, "up")
    assert out.split()[0] in ("FlightUnavailableError", "FlightInternalError", "FlightTimedOutError"), out + err
    assert float(out.split()[1]) < PEER_TIMEOUT * 3, out
