"""Load on `wirespeed serve`: CLIENTS clients x GETS DoGets of one TABLE_MB table at once, over
gRPC (pyarrow clients, one connection each) and over each data plane (`wirespeed get` processes),
against one client alone on the same plane, ROUNDS times with the planes in turns. Reports each
round's aggregate MB/s, the ratio to one client, and the server's peak and idle RSS (after 3 s
without calls), then the medians. With METRICS=1, `serve` also serves Prometheus metrics and logs
every call as JSON, and its /metrics is scraped every 0.5 s under the load: the slowest scrape is
reported. Usage: [PLANES=...] [ROUNDS=3] [METRICS=1] flight_load.py WIRESPEED_BIN."""
import os
import re
import statistics
import subprocess
import sys
import tempfile
import socket
import threading
import time
import urllib.request
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
METRICS = os.environ.get("METRICS", "0") not in ("", "0")
KEY = "flight load bench key 0123456789"


def status(pid, field):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith(field + ":"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(data):
    env = {**os.environ, "WIRESPEED_KEY": KEY}
    extra = ["--metrics", f"127.0.0.1:{free_port()}", "--log-format", "json"] if METRICS else []
    proc = subprocess.Popen([BIN, "serve", data, "--listen", "127.0.0.1:0", "--calls-per-client", "1024", *extra],
                            stderr=subprocess.PIPE, text=True, env=env)
    proc.metrics = extra[1] if METRICS else None
    for line in proc.stderr:
        m = re.search(r"grpc://\S+:(\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, f"grpc://127.0.0.1:{m.group(1)}"
    raise RuntimeError("serve did not start")


class Scraper(threading.Thread):
    """Scrapes `serve`'s /metrics every 0.5 s until stopped; keeps the slowest scrape's time."""

    def __init__(self, addr):
        super().__init__(daemon=True)
        self.addr, self.slowest, self.scrapes, self.done = addr, 0.0, 0, threading.Event()

    def run(self):
        while not self.done.wait(0.5):
            started = time.time()
            with urllib.request.urlopen(f"http://{self.addr}/metrics", timeout=10) as r:
                assert b"wirespeed_flight_calls_total" in r.read()
            self.slowest, self.scrapes = max(self.slowest, time.time() - started), self.scrapes + 1


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
        scraper = Scraper(proc.metrics) if METRICS else None
        if scraper:
            scraper.start()
        loaded = run(url, plane, CLIENTS)
        if scraper:
            scraper.done.set()
            scraper.join()
            print(f"  {plane}: {scraper.scrapes} scrapes under load, the slowest {scraper.slowest * 1000:.0f} ms",
                  flush=True)
        peak = status(proc.pid, "VmHWM")
        time.sleep(3)
        return alone, loaded, loaded / alone, peak, status(proc.pid, "VmRSS")
    finally:
        proc.kill()
        proc.wait()


main()
