"""Load on `wirespeed serve`: CLIENTS clients x GETS DoGets of one TABLE_MB table at once, over
gRPC (pyarrow clients, one connection each) and over each data plane (`wirespeed get` processes),
against one client alone on the same plane, ROUNDS times with the planes in turns. Reports each
round's aggregate MB/s, the ratio to one client, and the server's peak and idle RSS (after 3 s
without calls), then the medians. Usage: [PLANES=...] [ROUNDS=3] flight_load.py WIRESPEED_BIN."""
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.flight as flight

BIN = sys.argv[1]
CLIENTS = int(os.environ.get("CLIENTS", 64))
GETS = int(os.environ.get("GETS", 5))
TABLE_MB = int(os.environ.get("TABLE_MB", 200))
ROUNDS = int(os.environ.get("ROUNDS", 3))
PLANES = os.environ.get("PLANES", "grpc shm tcp ucx").split()
KEY = "flight load bench key 0123456789"


def status(pid, field):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith(field + ":"))


def serve(data):
    env = {**os.environ, "WIRESPEED_KEY": KEY}
    proc = subprocess.Popen([BIN, "serve", data, "--listen", "127.0.0.1:0", "--calls-per-client", "1024"],
                            stderr=subprocess.PIPE, text=True, env=env)
    for line in proc.stderr:
        m = re.search(r"grpc://\S+:(\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, f"grpc://127.0.0.1:{m.group(1)}"
    raise RuntimeError("serve did not start")


def grpc_get(url):
    c = flight.connect(url)
    ticket = c.get_flight_info(flight.FlightDescriptor.for_path("t.arrow")).endpoints[0].ticket
    n = 0
    for _ in range(GETS):
        for chunk in c.do_get(ticket):
            n += chunk.data.nbytes
    c.close()
    return n


def plane_get(url, plane):
    env = {**os.environ, "WIRESPEED_KEY": KEY}
    for _ in range(GETS):
        subprocess.run([BIN, "get", url, "t.arrow", "-o", "-", "--transport", plane], check=True,
                       stdout=subprocess.DEVNULL, env=env)
    return GETS * TABLE_MB * (1 << 20)


def run(url, plane, clients):
    one = (lambda: grpc_get(url)) if plane == "grpc" else (lambda: plane_get(url, plane))
    started = time.time()
    with ThreadPoolExecutor(clients) as pool:
        total = sum(pool.map(lambda _: one(), range(clients)))
    return total / (time.time() - started) / 1e6


def main():
    with tempfile.TemporaryDirectory() as data:
        rows = TABLE_MB * (1 << 20) // 32
        t = pa.table({c: pa.array(range(i, i + rows), pa.int64()) for i, c in enumerate("abcd")})
        feather.write_feather(t, os.path.join(data, "t.arrow"), compression="uncompressed", chunksize=1 << 16)
        del t
        print(f"{CLIENTS} clients x {GETS} DoGets of a {TABLE_MB} MB table at once, against one client alone")
        header = f"{'plane':6} {'one MB/s':>9} {'load MB/s':>10} {'ratio':>6} {'peak RSS MB':>12} {'idle RSS MB':>12}"
        print(header, flush=True)
        results = {plane: [] for plane in PLANES}
        for _ in range(ROUNDS):
            for plane in PLANES:
                row = measure(data, plane)
                results[plane].append(row)
                print(f"{plane:6} {row[0]:9.0f} {row[1]:10.0f} {row[2]:6.2f} {row[3]:12.0f} {row[4]:12.0f}", flush=True)
        print(f"medians of {ROUNDS} rounds")
        print(header)
        for plane, rows in results.items():
            m = [statistics.median(column) for column in zip(*rows)]  # the ratio: of the medians
            print(f"{plane:6} {m[0]:9.0f} {m[1]:10.0f} {m[1] / m[0]:6.2f} {m[3]:12.0f} {m[4]:12.0f}", flush=True)


def measure(data, plane):
    proc, url = serve(data)
    try:
        alone = run(url, plane, 1)
        loaded = run(url, plane, CLIENTS)
        peak = status(proc.pid, "VmHWM")
        time.sleep(3)
        return alone, loaded, loaded / alone, peak, status(proc.pid, "VmRSS")
    finally:
        proc.kill()
        proc.wait()


main()
