"""The `wirespeed` binary under test, shared by the interop suite (tests/interop) and the
Python package's (python/tests): where it is, a free port, and a process of it."""

import os
import re
import socket
import subprocess
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(os.environ.get("WIRESPEED_BIN", ROOT / "target" / "debug" / "wirespeed"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WirespeedProc:
    """A wirespeed process that announces its gRPC address on a line of its output; it gets
    the suite's `key` through WIRESPEED_KEY; `prefix` runs it elsewhere (on another host:
    `ip netns exec NS`)."""

    key = ""

    def __init__(self, args, env=None, pattern=r"grpc(?:\+tls)?://\S+", prefix=()):
        self.proc = subprocess.Popen([*prefix, str(BIN), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     env={**os.environ, "WIRESPEED_KEY": self.key, **(env or {})}, text=True)
        deadline = time.time() + 30
        self.output = []
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.output.append(line)
            m = re.search(pattern, line)
            if m:
                self.url = m.group(0)
                # Keep reading, so that a server logging every call never blocks on a full pipe.
                threading.Thread(target=self._drain, daemon=True).start()
                return
        self.proc.kill()
        raise RuntimeError("wirespeed did not start: " + "".join(self.output))

    def _drain(self):
        for line in self.proc.stdout:
            self.output.append(line)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def serve_on(proc_class, hosts, i, data, *args, env=None):
    """`wirespeed serve DATA` on host i of a tests/hosts.py Hosts, listening on all its
    addresses; `remote_url` is its URL as the other hosts reach it."""
    port = free_port()
    proc = proc_class(["serve", str(data), "--listen", f"0.0.0.0:{port}", *args], env=env, prefix=hosts.exec_args(i))
    proc.remote_url = f"{proc.url.split('://', 1)[0]}://{hosts.addr(i)}:{port}"
    proc.dir = data
    return proc
