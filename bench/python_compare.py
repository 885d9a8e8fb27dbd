"""wirespeed's Python package against pyarrow.flight, in turns on this machine (issue 47).

1. `do_get(...).read_all()` of 128 KiB batches (4 int64 columns): wirespeed.flight over the
   shm and tcp planes, served by `wirespeed bench flight-server`, against pyarrow.flight over
   grpc+unix and grpc+tcp, served by pyarrow (bench/flight_perf_pyarrow.py, C++ streaming one
   prepared batch over and over).
2. The same with the server in Python: the same PerfServer class, subclassing
   wirespeed.flight.FlightServerBase instead of pyarrow's, read over shm; then with the
   server's table in sealed shared memory (`flight.share`, once, untimed), which the client
   maps instead of receiving.
3. DoPut of the same bytes (a table of 128 KiB batches) into a server in Python that reads it
   batch by batch (pyarrow's PerfServer.do_put), over shm against pyarrow's over grpc+unix.
4. For reference, iperf3's one TCP stream over loopback: the kernel's limit for the tcp plane.
5. A 1 GiB `bytes` object sent and received as a memoryview over shm, between two Python
   processes, against `wirespeed bench raw --transport shm --size 1 GiB`, each after one
   untimed message. That first message's receiver faults in fresh memory, and right after
   the DoGets free theirs, the host must hand it back (this VM reports freed pages to it):
   whichever case ran first there made 0.6 to 0.7 of its speed. They take turns anyway.

Medians of RUNS rounds (default 4), each running every case once. A DoGet case reads three
times in its turn: the first read, after the other cases ran (25 s or more), then two more at
once, as a client reading table after table does. All three are reported: a shm client writes
the next table into the memory the last one left, while the first pays for memory the kernel
must find and zero, and the second for the rest of the area in which the first ended. Env:
RUNS, BYTES per DoGet (default 1.28 GB), WS (the wirespeed binary, default
target/release/wirespeed).
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as pf

import wirespeed
from wirespeed import flight

ROOT = Path(__file__).resolve().parents[1]
WS = os.environ.get("WS", str(ROOT / "target" / "release" / "wirespeed"))
RUNS = int(os.environ.get("RUNS", "4"))
BYTES = int(os.environ.get("BYTES", "1280000000"))
PER_BATCH = 4096  # rows: 128 KiB of 4 int64 columns
KEY = "python bench key"
GIB = 1 << 30
RAW_COUNT = 8

PY_SERVER = """
import json, sys
sys.path.insert(0, {bench!r})
import flight_perf_pyarrow as perf
import pyarrow as pa
from wirespeed import flight

class PerfServer(flight.FlightServerBase):  # as pyarrow's PerfServer, line for line
    get_flight_info = perf.PerfServer.get_flight_info
    do_put = perf.PerfServer.do_put
    shared = {{}}

    def list_actions(self, context):  # a keyed client asks it whether it serves planes
        return []

    def do_get(self, context, ticket):
        spec = json.loads(ticket.ticket)
        full = perf.batch(spec["per_batch"])
        whole, rest = divmod(spec["records"], spec["per_batch"])
        batches = [full] * whole + ([full.slice(0, rest)] if rest else [])
        table = pa.Table.from_batches(batches, full.schema)
        if spec.get("shared"):  # a table the server keeps, in sealed shared memory
            if ticket.ticket not in self.shared:
                self.shared[ticket.ticket] = flight.share(table)
            table = self.shared[ticket.ticket]
        return flight.RecordBatchStream(table)

server = PerfServer("grpc://127.0.0.1:0", key={key!r})
print(server.location, flush=True)
server.serve()
"""

RAW_RECEIVER = """
import sys, wirespeed
listener = wirespeed.listen(sys.argv[1], key={key!r})
print(listener.url, flush=True)
conn = listener.accept()
stream = conn.accept_stream()
got = 0
while (message := stream.recv()) is not None:
    view = memoryview(message[1])
    got += view.nbytes
    del view, message
    if got == {gib}:  # the warm-up message: the sender starts its clock now
        stream.send(b"warm")
stream.send(str(got).encode())
stream.finish()
"""


def start(args, env=None):
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    return proc, proc.stdout.readline().strip()


def ticket(shared=False):
    spec = {"records": BYTES // 32, "per_batch": PER_BATCH}
    return pf.Ticket(json.dumps({**spec, "shared": True} if shared else spec).encode())


def timed_reads(read):
    """GB/s of a first read and of the next two, back to back; each table dropped before the next."""
    rates = []
    for _ in range(3):
        start = time.perf_counter()
        table = read()
        seconds = time.perf_counter() - start
        assert table.num_rows == BYTES // 32, table.num_rows
        del table
        rates.append(BYTES / seconds / 1e9)
    return rates


def timed_puts(client, table):
    """GB/s of three uploads of `table` in turn; the server reads each batch by batch."""
    rates = []
    for _ in range(3):
        start = time.perf_counter()
        writer, results = client.do_put(pf.FlightDescriptor.for_command(b"perf"), table.schema)
        writer.write_table(table)
        writer.done_writing()
        rows = int(bytes(results.read()))
        writer.close()
        rates.append(BYTES / (time.perf_counter() - start) / 1e9)
        assert rows == table.num_rows, rows
    return rates


def raw_python():
    """GB/s of RAW_COUNT 1 GiB messages from a bytes object, received as memoryviews, after one
    untimed one."""
    receiver, url = start([sys.executable, "-c", RAW_RECEIVER.format(key=KEY, gib=GIB), "shm://@wirespeed-bench-py"])
    body = os.urandom(1 << 20) * 1024  # 1 GiB of bytes
    conn = wirespeed.connect(url, key=KEY, timeout=120)
    stream = conn.open_stream()
    stream.send(body)
    assert bytes(stream.recv()[1]) == b"warm"
    start_ = time.perf_counter()
    for _ in range(RAW_COUNT):
        stream.send(body)
    stream.finish()
    _, reply = stream.recv()
    seconds = time.perf_counter() - start_
    assert int(bytes(reply)) == (RAW_COUNT + 1) * GIB
    conn.close()
    receiver.wait(timeout=60)
    return RAW_COUNT * GIB / seconds / 1e9


def raw_rust():
    out = subprocess.run([WS, "bench", "raw", "--transport", "shm", "--size", str(GIB), "--count", str(RAW_COUNT),
                          "--warmup", "1", "--json"], capture_output=True, text=True, check=True, env={**os.environ, "WIRESPEED_KEY": KEY})
    return json.loads(out.stdout)["mb_per_s"] / 1e3


def iperf3(port):
    """GB/s of one TCP stream over loopback for 2 s: what the kernel moves with no work per batch."""
    server = subprocess.Popen(["iperf3", "-s", "-1", "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    out = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", "2", "-J"], capture_output=True,
                         text=True, check=True)
    server.wait(timeout=10)
    return json.loads(out.stdout)["end"]["sum_received"]["bits_per_second"] / 8e9


def main():
    bench = str(ROOT / "bench")
    work = tempfile.mkdtemp()
    port = 40000 + os.getpid() % 20000
    procs = [
        start([sys.executable, f"{bench}/flight_perf_pyarrow.py", "serve", f"grpc+tcp://127.0.0.1:{port}"])[0],
        start([sys.executable, f"{bench}/flight_perf_pyarrow.py", "serve", f"grpc+unix://{work}/f.sock"])[0],
    ]
    rust, _ = start([WS, "bench", "flight-server", "--listen", f"127.0.0.1:{port + 1}"], env={"WIRESPEED_KEY": KEY})
    py_ours, py_location = start([sys.executable, "-c", PY_SERVER.format(bench=bench, key=KEY)])
    procs += [rust, py_ours]
    time.sleep(2)
    pa_tcp = pf.connect(f"grpc+tcp://127.0.0.1:{port}")
    pa_unix = pf.connect(f"grpc+unix://{work}/f.sock")
    ws_shm = flight.connect(f"grpc://127.0.0.1:{port + 1}", key=KEY, transport="shm")
    ws_tcp = flight.connect(f"grpc://127.0.0.1:{port + 1}", key=KEY, transport="tcp")
    ws_py = flight.connect(py_location, key=KEY, transport="shm")
    full = pa.record_batch([pa.array(range(PER_BATCH), pa.int64())] * 4, names=list("abcd"))
    upload = pa.Table.from_batches([full] * (BYTES // 32 // PER_BATCH))
    cases = {
        "pyarrow grpc+tcp": lambda: timed_reads(lambda: pa_tcp.do_get(ticket()).read_all()),
        "pyarrow grpc+unix": lambda: timed_reads(lambda: pa_unix.do_get(ticket()).read_all()),
        "wirespeed tcp": lambda: timed_reads(lambda: ws_tcp.do_get(ticket()).read_all()),
        "wirespeed shm": lambda: timed_reads(lambda: ws_shm.do_get(ticket()).read_all()),
        "wirespeed shm, Python server": lambda: timed_reads(lambda: ws_py.do_get(ticket()).read_all()),
        "wirespeed shm, Python, shared": lambda: timed_reads(lambda: ws_py.do_get(ticket(True)).read_all()),
        "pyarrow grpc+unix, DoPut": lambda: timed_puts(pa_unix, upload),
        "wirespeed shm, DoPut": lambda: timed_puts(ws_py, upload),
        "iperf3 loopback, 1 stream": lambda: [iperf3(port + 2)],
        "raw 1 GiB, Python memoryview": lambda: [raw_python()],
        "raw 1 GiB, wirespeed bench raw": lambda: [raw_rust()],
    }
    ws_py.do_get(ticket(True)).read_all()  # the server shares its table once, untimed
    results = {name: [] for name in cases}  # per round: [first, second, third] or [one]
    try:
        for run in range(RUNS):
            names = list(cases)
            if run % 2:  # whichever goes first after the DoGets runs slower: take turns
                names[-2:] = reversed(names[-2:])
            for name in names:
                results[name].append(cases[name]())
    finally:
        for p in procs:
            p.kill()
    ratios = {
        "wirespeed shm": ("pyarrow grpc+unix", 5.0),
        "wirespeed tcp": ("pyarrow grpc+tcp", 2.5),
        "wirespeed shm, Python server": ("pyarrow grpc+unix", 3.0),
        "wirespeed shm, Python, shared": ("pyarrow grpc+unix", 3.0),
        "wirespeed shm, DoPut": ("pyarrow grpc+unix, DoPut", None),
        "raw 1 GiB, Python memoryview": ("raw 1 GiB, wirespeed bench raw", 0.8),
    }
    for read, label in enumerate(["first read or put (raw: each)", "second read or put", "third read or put"]):
        rows = {name: [r[read] for r in v] for name, v in results.items() if len(v[0]) > read}
        med = {name: statistics.median(r) for name, r in rows.items()}
        print(f"\n{label:32} {'GB/s (median)':>14}  runs            ratio (target)")
        for name, value in med.items():
            runs = " ".join(f"{r:.2f}" for r in rows[name])
            ratio = ""
            if name in ratios and ratios[name][0] in med:
                base, target = ratios[name]
                ratio = f"{value / med[base]:.2f} x {base}" + (f" (>= {target})" if target else "")
            print(f"{name:32} {value:14.2f}  {runs:15} {ratio}")
    tcp, kernel = statistics.median(r[2] for r in results["wirespeed tcp"]), statistics.median(
        r[0] for r in results["iperf3 loopback, 1 stream"])
    print(f"\nwirespeed tcp, third read: {tcp / kernel:.2f} of iperf3's loopback")


if __name__ == "__main__":
    main()
