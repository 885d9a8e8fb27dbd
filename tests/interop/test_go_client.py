"""`wirespeed serve` with Arrow's Go Flight client (arrow-go, built from tests/interop/goflight):
unpadded Basic credentials, a lower-case bearer scheme, list, get, a lock-step upload whose
batches' metadata come back one by one, and a wrong password refused; in the clear and over
TLS (grpc+tls with the test CA as its roots)."""
import json
import subprocess

import pyarrow as pa
import pyarrow.feather as feather
import pytest

import tls_certs
from conftest import Proc, free_port, table


def served(tmp_path, password=None, certs=None, ticket_ttl=None):
    data = tmp_path / "data"
    data.mkdir()
    feather.write_feather(table(10_000), data / "t.arrow", compression="uncompressed")
    env = {"WIRESPEED_FLIGHT_PASSWORD": password} if password else {}
    tls = ["--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key)] if certs else []
    ttl = [] if ticket_ttl is None else ["--ticket-ttl", str(ticket_ttl)]
    proc = Proc(["serve", str(data), "--listen", f"127.0.0.1:{free_port()}", *tls, *ttl], env=env)
    proc.dir = data
    return proc


@pytest.mark.parametrize("password,tls", [(None, False), (None, True), ("s3cret", True)],
                         ids=["open", "tls", "password-over-tls"])
def test_the_go_client_lists_gets_and_puts(goflight, tmp_path, password, tls):
    certs = tls_certs.make(tmp_path / "certs") if tls else None
    proc = served(tmp_path, password, certs)
    try:
        address = proc.url.split("://", 1)[1]
        r = subprocess.run([str(goflight), address, password or "", str(certs.ca) if certs else ""],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        assert got["flights"] == ["t.arrow"]
        assert (got["rows"], got["sum"]) == (10_000, sum(range(10_000)))
        assert got["acks"] == ["batch 0", "batch 1", "batch 2"]
        assert got["put_rows"] == 3000
        put = feather.read_table(proc.dir / "fromgo.arrow")
        assert put.column("x").to_pylist() == list(range(3000))
        assert put.column("s").to_pylist() == [f"row {i}" for i in range(3000)]
        assert put.schema.field("s").type == pa.string()
        if password:
            assert got["lower_case_bearer"]
            assert got["wrong_password"] == "Unauthenticated"
    finally:
        proc.stop()


def test_the_go_client_polls_renews_and_keeps_session_options(goflight, tmp_path):
    """PollFlightInfo, CancelFlightInfo, tickets that expire and RenewFlightEndpoint, and the
    session options (over arrow-go's cookie middleware): what pyarrow lacks."""
    proc = served(tmp_path, ticket_ttl=1)
    try:
        r = subprocess.run([str(goflight), proc.url.split("://")[1], "newer"], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out == {"poll_progress": 1.0, "poll_rows": 10_000, "ordered": True, "app_metadata": True,
                       "cancel_status": "CANCEL_STATUS_NOT_CANCELLABLE", "renewed_later": True,
                       "renewed_rows": 10_000, "expired": "NotFound",
                       "session_options": {"answer": "42", "name": "wirespeed"}, "closed": True}
    finally:
        proc.stop()
