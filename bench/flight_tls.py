"""Flight over TLS, in turns: `wirespeed serve` over grpc+tls read by pyarrow's client, against
pyarrow's own TLS server holding the same table, and wirespeed.flight with the key over TLS
(shm plane) against the same `serve`; then the same in the clear. A 0.5 GB Arrow file of 128 KiB batches (4 int64 columns),
read ROUNDS times by each; medians and their ratios. Run from the repository root after a
release build (`make bench-flight-tls`)."""

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.flight as pf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import tls_certs  # noqa: E402

from wirespeed import flight  # noqa: E402

WS = os.environ.get("WIRESPEED_BIN", str(ROOT / "target" / "release" / "wirespeed"))
KEY = "flight tls bench key 0123456789"
ROUNDS = int(os.environ.get("ROUNDS", "5"))
CACHE_MB = os.environ.get("CACHE_MB", "0")  # serve's --cache-mb: 0 reads the file each time
BYTES = 512 << 20
PER_BATCH = 4096  # 128 KiB of 4 int64 columns


class Tables(pf.FlightServerBase):
    def __init__(self, location, table, **kwargs):
        super().__init__(location, **kwargs)
        self.table = table

    def get_flight_info(self, context, descriptor):
        return pf.FlightInfo(self.table.schema, descriptor, [pf.FlightEndpoint(b"t.arrow", [])],
                             self.table.num_rows, self.table.nbytes)

    def do_get(self, context, ticket):
        return pf.RecordBatchStream(self.table)


def gbps(read):
    start = time.perf_counter()
    table = read()
    seconds = time.perf_counter() - start
    assert table.nbytes >= BYTES * 0.99
    return table.nbytes / seconds / 1e9


def main():
    work = Path(tempfile.mkdtemp())
    certs = tls_certs.make(work / "certs")
    full = pa.record_batch([pa.array(range(PER_BATCH), pa.int64())] * 4, names=list("abcd"))
    table = pa.Table.from_batches([full] * (BYTES // full.nbytes))
    (work / "data").mkdir()
    feather.write_feather(table, work / "data" / "t.arrow", compression="uncompressed", chunksize=PER_BATCH)
    roots = certs.read("ca")

    def start(*tls):
        proc = subprocess.Popen([WS, "serve", str(work / "data"), "--listen", "127.0.0.1:0", "--cache-mb", CACHE_MB,
                                 *tls], stderr=subprocess.PIPE, text=True, env={**os.environ, "WIRESPEED_KEY": KEY})
        return proc, proc.stderr.readline().split(" on ")[1].split()[0]

    serve, url = start("--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key))
    plain, plain_url = start()
    theirs = Tables("grpc+tls://127.0.0.1:0", table, tls_certificates=[(certs.read("server_cert"),
                                                                      certs.read("server_key"))])
    threading.Thread(target=theirs.serve, daemon=True).start()
    ticket = pf.Ticket(b"t.arrow")
    pa_serve = pf.connect(url, tls_root_certs=roots)
    pa_theirs = pf.connect(f"grpc+tls://127.0.0.1:{theirs.port}", tls_root_certs=roots)
    ws_serve = flight.connect(url, tls_root_certs=roots, key=KEY)
    pa_plain = pf.connect(plain_url)
    ws_plain = flight.connect(plain_url, key=KEY)
    assert ws_serve.do_get(ticket).plane == "shm"
    cases = {
        "pyarrow client, wirespeed serve over grpc+tls": lambda: pa_serve.do_get(ticket).read_all(),
        "pyarrow client, pyarrow server over grpc+tls": lambda: pa_theirs.do_get(ticket).read_all(),
        "wirespeed.flight with the key, serve over grpc+tls (shm)": lambda: ws_serve.do_get(ticket).read_all(),
        "pyarrow client, wirespeed serve over grpc": lambda: pa_plain.do_get(ticket).read_all(),
        "wirespeed.flight with the key, serve over grpc (shm)": lambda: ws_plain.do_get(ticket).read_all(),
    }
    for read in cases.values():
        read()  # warm: the cache, the connections
    runs = {name: [] for name in cases}
    for _ in range(ROUNDS):
        for name, read in cases.items():
            runs[name].append(gbps(read))
    medians = {name: statistics.median(v) for name, v in runs.items()}
    base = medians["pyarrow client, pyarrow server over grpc+tls"]
    print(f"{'case':58} {'GB/s (median)':>14} {'min':>6} {'max':>6} {'x pyarrow':>10}")
    for name, v in runs.items():
        print(f"{name:58} {medians[name]:14.2f} {min(v):6.2f} {max(v):6.2f} {medians[name] / base:10.2f}")
    serve.kill()
    plain.kill()
    theirs.shutdown()


if __name__ == "__main__":
    main()
