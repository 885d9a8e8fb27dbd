"""Programs written the way Arrow's Python Flight examples are (flight_examples/: plain
pyarrow.flight, unchanged), run against each other with pyarrow and with wirespeed.flight in
its place (holding a key), in all four pairings, in the clear and over TLS."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tls_certs
from conftest import KEY, free_port

HERE = Path(__file__).resolve().parent
RUN_AS_WIRESPEED = ("import runpy, sys, swap_in_wirespeed; sys.argv = sys.argv[1:]; "
                    "runpy.run_path(sys.argv[0], run_name='__main__')")


def command(program: str, wirespeed: bool, *args: str) -> list[str]:
    path = str(HERE / "flight_examples" / program)
    return [sys.executable, "-c", RUN_AS_WIRESPEED, path, *args] if wirespeed else [sys.executable, path, *args]


def environment(wirespeed: bool) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE / "pyarrow_suite"), os.environ.get("PYTHONPATH", "")]))
    env.pop("WIRESPEED_KEY", None)
    if wirespeed:
        env["WIRESPEED_KEY"] = KEY
    return env


@pytest.mark.parametrize("tls", [False, True], ids=["plaintext", "tls"])
@pytest.mark.parametrize("server_ws,client_ws", [(False, False), (True, False), (False, True), (True, True)],
                         ids=["pyarrow-pyarrow", "wirespeed-server", "wirespeed-client", "wirespeed-wirespeed"])
def test_arrows_example_programs_run_unchanged(tmp_path, tls, server_ws, client_ws):
    certs = tls_certs.make(tmp_path / "certs") if tls else None
    port = str(free_port())
    server_args = [port, str(certs.server_cert), str(certs.server_key)] if certs else [port]
    server = subprocess.Popen(command("server.py", server_ws, *server_args), stdout=subprocess.PIPE, text=True,
                              env=environment(server_ws))
    try:
        assert "Serving on" in server.stdout.readline()
        client_args = [f"localhost:{port}", *([str(certs.ca)] if certs else [])]
        done = subprocess.run(command("client.py", client_ws, *client_args), capture_output=True, text=True,
                              timeout=120, env=environment(client_ws))
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout.strip().splitlines()[-1])
        assert report["flights"] == [["example.csv"]]
        scheme = "grpc+tls" if tls else "grpc+tcp"
        plane = "shm" if server_ws and client_ws else "grpc"  # both hold the key: the data takes shm
        assert report["read"] == [[f"{scheme}://localhost:{port}", 10_000, True, plane]]
        assert report["actions"] == ["clear", "shutdown"]  # the service's own list, nothing added
        assert report["healthcheck"] == []
    finally:
        server.kill()
        server.wait()
