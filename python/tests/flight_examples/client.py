"""A Flight client written the way Arrow's example (python/examples/flight/client.py) is: plain
pyarrow.flight; it uploads a table, lists flights and actions, reads each endpoint from every
location it names, and runs an action. Prints what it found as one line of JSON.
Usage: client.py HOST:PORT [ROOTS]"""

import json
import sys

import pyarrow
import pyarrow.flight


def main():
    host, port = sys.argv[1].split(":")
    kwargs = {}
    scheme = "grpc+tcp"
    if len(sys.argv) > 2:
        kwargs["tls_root_certs"] = open(sys.argv[2], "rb").read()
        scheme = "grpc+tls"
    client = pyarrow.flight.FlightClient(f"{scheme}://{host}:{port}", **kwargs)
    client.wait_for_available(timeout=10)
    table = pyarrow.table({"n": list(range(10_000)), "s": [f"row {i}" for i in range(10_000)]})
    writer, _ = client.do_put(pyarrow.flight.FlightDescriptor.for_path("example.csv"), table.schema)
    writer.write_table(table, max_chunksize=1024)
    writer.close()

    report = {"flights": [], "actions": [], "read": []}
    for flight in client.list_flights():
        report["flights"].append([p.decode() for p in flight.descriptor.path])
        for endpoint in flight.endpoints:
            for location in endpoint.locations:
                get_client = pyarrow.flight.FlightClient(location, **kwargs)
                reader = get_client.do_get(endpoint.ticket)
                got = reader.read_all()
                # (Arrow's example prints the rows; this reports them, and which plane carried them.)
                plane = getattr(reader, "plane", "grpc")
                report["read"].append([location.uri.decode(), got.num_rows, got.equals(table), plane])
    report["actions"] = [a.type for a in client.list_actions()]
    report["healthcheck"] = [r.body.to_pybytes().decode() for r in client.do_action(pyarrow.flight.Action("healthcheck", b""))]
    print(json.dumps(report))


if __name__ == "__main__":
    main()
