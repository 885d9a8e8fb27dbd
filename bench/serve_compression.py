"""What sending gRPC clients uncompressed batches costs on serve's stored-file path: pyarrow's
client reads one table over gRPC from three servers in turns, RUNS rounds each:
  - an LZ4 feather file (pyarrow's default), decoded and sent uncompressed (serve's default);
  - the same file with `--compression lz4`: its batches go as the file holds them, still LZ4
    (what serve did for every client before);
  - the table stored uncompressed, sent as it lies.
Prints MB/s (decoded bytes) per round and the ratios of medians. Usage:
  .venv/bin/python bench/serve_compression.py [target/release/wirespeed]"""
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.flight as flight

BIN = sys.argv[1] if len(sys.argv) > 1 else "target/release/wirespeed"
ROWS = 4_000_000
RUNS = int(os.environ.get("RUNS", "5"))


def server(data, *args):
    proc = subprocess.Popen([BIN, "serve", str(data), "--listen", "127.0.0.1:0", "--planes", "none", *args],
                            stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if m := re.search(r"grpc://\S+", line):
            return proc, m.group(0)
    raise RuntimeError("serve did not start")


def main():
    with tempfile.TemporaryDirectory() as d:
        data = Path(d)
        table = pa.table({"id": pa.array(range(ROWS), pa.int64()), "x": [i * 0.25 for i in range(ROWS)],
                          "s": [f"row {i % 1000}" for i in range(ROWS)]})
        feather.write_feather(table, data / "lz4.feather", chunksize=65536)
        feather.write_feather(table, data / "plain.arrow", compression="uncompressed", chunksize=65536)
        size = table.nbytes
        cases = {"lz4 decoded (default)": ((), "lz4.feather"), "lz4 as stored (--compression lz4)":
                 (("--compression", "lz4"), "lz4.feather"), "uncompressed as stored": ((), "plain.arrow")}
        servers = {name: server(data, *args) for name, (args, _) in cases.items()}
        rates = {name: [] for name in cases}
        try:
            for _ in range(RUNS):
                for name, (_, file) in cases.items():
                    client = flight.connect(servers[name][1])
                    start = time.perf_counter()
                    got = client.do_get(flight.Ticket(file.encode())).read_all()
                    rates[name].append(size / (time.perf_counter() - start) / 1e6)
                    assert got.num_rows == ROWS
                    client.close()
        finally:
            for proc, _ in servers.values():
                proc.kill()
        base = statistics.median(rates["lz4 as stored (--compression lz4)"])
        for name, r in rates.items():
            print(f"{name:36s} MB/s {' / '.join(f'{x:,.0f}' for x in r)}  median {statistics.median(r):,.0f}"
                  f"  ({statistics.median(r) / base:.2f} x as stored)")


if __name__ == "__main__":
    main()
