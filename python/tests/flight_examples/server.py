"""A Flight server written the way Arrow's example (python/examples/flight/server.py) is: plain
pyarrow.flight, tables kept by descriptor, endpoints naming this server, a few actions.
Usage: server.py PORT [CERT KEY]"""

import ast
import sys
import threading

import pyarrow
import pyarrow.flight


class FlightServer(pyarrow.flight.FlightServerBase):
    def __init__(self, host="localhost", location=None, tls_certificates=None, **kwargs):
        super().__init__(location, tls_certificates=tls_certificates, **kwargs)
        self.flights = {}
        self.host = host
        self.tls_certificates = tls_certificates

    @classmethod
    def descriptor_to_key(cls, descriptor):
        return (descriptor.descriptor_type.value, descriptor.command, tuple(descriptor.path or tuple()))

    def _make_flight_info(self, key, descriptor, table):
        if self.tls_certificates:
            location = pyarrow.flight.Location.for_grpc_tls(self.host, self.port)
        else:
            location = pyarrow.flight.Location.for_grpc_tcp(self.host, self.port)
        endpoints = [pyarrow.flight.FlightEndpoint(repr(key), [location])]
        sink = pyarrow.MockOutputStream()
        with pyarrow.RecordBatchStreamWriter(sink, table.schema) as writer:
            writer.write_table(table)
        return pyarrow.flight.FlightInfo(table.schema, descriptor, endpoints, table.num_rows, sink.size())

    def list_flights(self, context, criteria):
        for key, table in self.flights.items():
            if key[1] is not None:
                descriptor = pyarrow.flight.FlightDescriptor.for_command(key[1])
            else:
                descriptor = pyarrow.flight.FlightDescriptor.for_path(*key[2])
            yield self._make_flight_info(key, descriptor, table)

    def get_flight_info(self, context, descriptor):
        key = FlightServer.descriptor_to_key(descriptor)
        if key in self.flights:
            return self._make_flight_info(key, descriptor, self.flights[key])
        raise KeyError("Flight not found.")

    def do_put(self, context, descriptor, reader, writer):
        self.flights[FlightServer.descriptor_to_key(descriptor)] = reader.read_all()

    def do_get(self, context, ticket):
        key = ast.literal_eval(ticket.ticket.decode())
        if key not in self.flights:
            return None
        return pyarrow.flight.RecordBatchStream(self.flights[key])

    def list_actions(self, context):
        return [("clear", "Clear the stored flights."), ("shutdown", "Shut down this server.")]

    def do_action(self, context, action):
        if action.type == "clear":
            self.flights.clear()
        elif action.type == "healthcheck":
            pass
        elif action.type == "shutdown":
            yield pyarrow.flight.Result(pyarrow.py_buffer(b"Shutdown!"))
            threading.Thread(target=self.shutdown).start()
        else:
            raise KeyError(f"Unknown action {action.type!r}")


def main():
    port = int(sys.argv[1])
    tls = None
    scheme = "grpc+tcp"
    if len(sys.argv) > 3:
        tls = [(open(sys.argv[2], "rb").read(), open(sys.argv[3], "rb").read())]
        scheme = "grpc+tls"
    server = FlightServer("localhost", f"{scheme}://localhost:{port}", tls_certificates=tls)
    print("Serving on", f"{scheme}://localhost:{port}", flush=True)
    server.serve()


if __name__ == "__main__":
    main()
