"""Fixtures for the Python package's tests: real servers (the `wirespeed` binary, pyarrow's
and wirespeed's own Python server) and real clients."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.flight as pf
import pytest

from wirespeed import flight

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from wirespeed_proc import BIN, ROOT, WirespeedProc, free_port  # noqa: E402, F401

KEY = "python test key, 0123456789"


def plane(reader_or_writer):
    """The plane a call runs on: a data plane's reader or writer says; on gRPC they are
    pyarrow's own, which do not."""
    return getattr(reader_or_writer, "plane", "grpc")


def table(rows=20_000, seed=0):
    return pa.table({
        "a": pa.array(range(seed, seed + rows), pa.int64()),
        "s": pa.array([None if i % 11 == 0 else f"row {i}" for i in range(rows)]),
    })


class Tables(flight.FlightServerBase):
    """A small service over named tables, the same for wirespeed's server and pyarrow's."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tables = {b"t": table(), b"small": table(100, seed=5)}
        self.lock = threading.Lock()

    def _info(self, name):
        t = self.tables[name]
        descriptor = pf.FlightDescriptor.for_command(name)
        return pf.FlightInfo(t.schema, descriptor, [pf.FlightEndpoint(name, [])], t.num_rows, t.nbytes)

    def list_flights(self, context, criteria):
        return [self._info(n) for n in sorted(self.tables)]

    def get_schema(self, context, descriptor):
        return pf.SchemaResult(self.get_flight_info(context, descriptor).schema)

    def get_flight_info(self, context, descriptor):
        if descriptor.command not in self.tables:
            raise KeyError(f"no table {descriptor.command!r}")
        return self._info(descriptor.command)

    def do_get(self, context, ticket):
        if ticket.ticket == b"boom":
            raise RuntimeError("exploded")
        if ticket.ticket not in self.tables:
            raise KeyError(f"no table {ticket.ticket!r}")
        return flight.RecordBatchStream(self.tables[ticket.ticket])

    def do_put(self, context, descriptor, reader, writer):
        if descriptor.command == b"ack":  # a PutResult for each batch, as Arrow's examples do
            for i, chunk in enumerate(reader):
                writer.write(f"{i}: {chunk.data.num_rows} rows".encode())
            return
        got = reader.read_all()
        with self.lock:
            self.tables[descriptor.command] = got
        writer.write(f"{got.num_rows} rows".encode())

    def do_exchange(self, context, descriptor, reader, writer):
        writer.begin(reader.schema)
        if descriptor.command == b"fail":
            raise ValueError("no exchange today")
        for chunk in reader:
            doubled = pa.RecordBatch.from_arrays([pc_multiply(chunk.data.column(0))], ["a"])
            writer.write_batch(doubled)

    def do_action(self, context, action):
        if action.type == "echo":
            return [action.body.to_pybytes()]
        raise NotImplementedError(f"unknown action {action.type}")

    def list_actions(self, context):
        return [("echo", "returns its body")]


def pc_multiply(col):
    import pyarrow.compute as pc

    return pc.multiply(col, 2)


@pytest.fixture
def py_server():
    """wirespeed's Python server, on gRPC and the data planes."""
    server = Tables("grpc://127.0.0.1:0", key=KEY)
    yield server
    server.shutdown()


class Proc(WirespeedProc):
    key = KEY


@pytest.fixture
def served(tmp_path):
    """`wirespeed serve` over a directory holding one Arrow file."""
    data = tmp_path / "data"
    data.mkdir()
    feather.write_feather(table(seed=1), data / "plain.arrow", compression="uncompressed")
    proc = Proc(["serve", str(data), "--listen", f"127.0.0.1:{free_port()}"])
    proc.dir = data
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    """A real sshd on 127.0.0.1 that lets this user in with a key of its own; yields the
    ssh command (with options) that reaches it."""
    d = tmp_path_factory.mktemp("sshd")
    for name in ("host_key", "user_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True)
    (d / "authorized_keys").write_bytes((d / "user_key.pub").read_bytes())
    port = free_port()
    os.makedirs("/run/sshd", exist_ok=True)  # privilege separation wants it; we are root
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nAuthorizedKeysFile {d}/authorized_keys\n"
        f"PidFile {d}/sshd.pid\nStrictModes no\nUsePAM no\nPermitRootLogin yes\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n")
    server = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(d / "sshd_config")], stderr=subprocess.DEVNULL)
    ssh = (f"ssh -F /dev/null -p {port} -i {d}/user_key -o StrictHostKeyChecking=no "
           "-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes")
    deadline = time.monotonic() + 20
    while subprocess.run([*ssh.split(), "127.0.0.1", "true"], stderr=subprocess.DEVNULL).returncode != 0:
        assert time.monotonic() < deadline, "sshd did not come up"
        time.sleep(0.1)
    yield ssh
    server.kill()
    server.wait()
