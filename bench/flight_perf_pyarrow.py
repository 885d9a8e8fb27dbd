"""pyarrow.flight's side of bench/flight_compare: the same test as `wirespeed bench flight`.

  server: python flight_perf_pyarrow.py serve LOCATION         (grpc://host:port or grpc+unix://path)
  client: python flight_perf_pyarrow.py get|put LOCATION RECORDS PER_BATCH

The server streams one prepared batch of 4 int64 columns over and over, from C++ (as the C++
perf server does); the client reads batch by batch, timing each, and prints one JSON line in the shape of
`wirespeed bench flight --json`.
"""
import json
import sys
import time

import pyarrow as pa
import pyarrow.flight as flight


def batch(rows):
    return pa.record_batch([pa.array(range(s, rows * 4, 4), pa.int64()) for s in range(4)], names=list("abcd"))


class PerfServer(flight.FlightServerBase):
    def get_flight_info(self, context, descriptor):
        # The command `wirespeed bench flight` sends: {"streams", "records", "per_batch"}.
        spec = json.loads(descriptor.command)
        ticket = json.dumps({"records": spec["records"], "per_batch": spec["per_batch"]}).encode()
        endpoints = [flight.FlightEndpoint(ticket, []) for _ in range(spec["streams"])]
        return flight.FlightInfo(batch(0).schema, descriptor, endpoints, spec["streams"] * spec["records"], -1)

    def do_get(self, context, ticket):
        spec = json.loads(ticket.ticket)
        full = batch(spec["per_batch"])
        whole, rest = divmod(spec["records"], spec["per_batch"])
        batches = [full] * whole + ([full.slice(0, rest)] if rest else [])
        # A table of references to one batch: pyarrow streams it from C++, no Python per batch.
        return flight.RecordBatchStream(pa.Table.from_batches(batches, full.schema))

    def do_put(self, context, descriptor, reader, writer):
        rows = 0
        while True:
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                break
            rows += chunk.data.num_rows
        writer.write(pa.py_buffer(str(rows).encode()))


def report(method, records, per_batch, seconds, latencies):
    latencies.sort()
    q = lambda p: latencies[round((len(latencies) - 1) * p)] / 1000
    nbytes = records * 32
    print(json.dumps({
        "method": method, "transport": "pyarrow", "batch_bytes": per_batch * 32, "batches": len(latencies),
        "bytes": nbytes, "seconds": seconds, "mb_per_s": nbytes / seconds / 1e6,
        "mib_per_s": nbytes / seconds / 2**20, "batches_per_s": len(latencies) / seconds,
        "latency_us": {"mean": sum(latencies) / len(latencies) / 1000, "p50": q(0.5), "p95": q(0.95),
                       "p99": q(0.99), "max": latencies[-1] / 1000},
    }))


def main():
    mode, location = sys.argv[1], sys.argv[2]
    if mode == "serve":
        server = PerfServer(location)
        print("listening", location, flush=True)
        server.serve()
        return
    records, per_batch = int(sys.argv[3]), int(sys.argv[4])
    client = flight.connect(location)
    client.wait_for_available(timeout=10)
    latencies = []
    start = time.perf_counter_ns()
    if mode == "get":
        ticket = flight.Ticket(json.dumps({"records": records, "per_batch": per_batch}).encode())
        reader = client.do_get(ticket)
        t = time.perf_counter_ns()
        got = 0
        while True:
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                break
            got += chunk.data.num_rows
            now = time.perf_counter_ns()
            latencies.append(now - t)
            t = now
        assert got == records, (got, records)
    else:
        full = batch(per_batch)
        writer, answer = client.do_put(flight.FlightDescriptor.for_path("perf-put"), full.schema)
        left = records
        while left > 0:
            n = min(left, per_batch)
            t = time.perf_counter_ns()
            writer.write_batch(full.slice(0, n))
            latencies.append(time.perf_counter_ns() - t)
            left -= n
        writer.done_writing()
        stored = int(answer.read().to_pybytes())
        writer.close()
        assert stored == records, (stored, records)
    report("DoGet" if mode == "get" else "DoPut", records, per_batch, (time.perf_counter_ns() - start) / 1e9, latencies)


if __name__ == "__main__":
    main()
