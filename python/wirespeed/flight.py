"""Arrow Flight shaped like `pyarrow.flight`: change the import and the data of every call
can travel over shared memory (same host), UCX, libfabric or TCP instead of gRPC.

The control plane is standard gRPC, so the client talks to any Flight server and any Flight
client talks to the server. Descriptors, tickets, FlightInfo and the rest are pyarrow.flight's
own classes. A data plane needs a key both ends hold (`key=` or WIRESPEED_KEY); without one,
calls go over gRPC.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from pyarrow.flight import (
    Action,
    ActionType,
    DescriptorType,
    FlightDescriptor,
    FlightEndpoint,
    FlightInfo,
    Location,
    Result,
    SchemaResult,
    Ticket,
)


from . import Key, _key, _native
from ._errors import UsageError
from ._flight_base import (
    FlightAlreadyExistsError,
    FlightCancelledError,
    FlightError,
    FlightInternalError,
    FlightInvalidArgumentError,
    FlightNotFoundError,
    FlightNotImplementedError,
    FlightServerError,
    FlightStreamChunk,
    FlightTimedOutError,
    FlightUnauthenticatedError,
    FlightUnauthorizedError,
    FlightUnavailableError,
    _descriptor,
    _Reading,
    _uri,
)
from ._flight_server import (
    DirectoryServer,
    FlightServerBase,
    GeneratorStream,
    RecordBatchStream,
    ServerCallContext,
    serve,
    share,
)


__all__ = [
    "Action",
    "ActionType",
    "DescriptorType",
    "FlightAlreadyExistsError",
    "FlightCancelledError",
    "FlightClient",
    "FlightDescriptor",
    "FlightEndpoint",
    "FlightError",
    "FlightInfo",
    "FlightInternalError",
    "FlightInvalidArgumentError",
    "FlightMetadataReader",
    "FlightNotFoundError",
    "FlightNotImplementedError",
    "FlightServerBase",
    "FlightServerError",
    "FlightStreamChunk",
    "FlightStreamReader",
    "FlightStreamWriter",
    "FlightTimedOutError",
    "FlightUnauthenticatedError",
    "FlightUnauthorizedError",
    "FlightUnavailableError",
    "GeneratorStream",
    "Location",
    "RecordBatchStream",
    "Result",
    "SchemaResult",
    "ServerCallContext",
    "DirectoryServer",
    "Ticket",
    "connect",
    "serve",
    "share",
]


class FlightStreamReader(_Reading):
    """The batches of a `do_get` (or the answers of a `do_exchange`)."""

    def __init__(self, native: Any) -> None:
        self._native = native

    @property
    def plane(self) -> str:
        """The plane carrying the data: shm, ucx, tcp, ofi+<provider> or grpc."""
        return self._native.plane

    def cancel(self) -> None:
        self._native.cancel()

    def __enter__(self) -> FlightStreamReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()


class FlightMetadataReader:
    """The server's PutResults of a `do_put`. While writing goes on, `read` waits for the next
    (a server may acknowledge each batch, as Arrow's examples do); after `done_writing` it
    gives the rest, then None."""

    def __init__(self, writer: FlightStreamWriter) -> None:
        self._writer = writer

    def read(self) -> pa.Buffer | None:
        writer = self._writer
        if not writer._done:
            result = writer._writer().next_result()
            return None if result is None else pa.py_buffer(result)
        return pa.py_buffer(writer._results.pop(0)) if writer._results else None


class FlightStreamWriter:
    """The sending half of a `do_put` or `do_exchange`."""

    def __init__(self, start: Callable[[pa.Schema], Any], native: Any = None) -> None:
        self._start = start
        self._native = native
        self._results: list[bytes] = []
        self._done = False

    @property
    def plane(self) -> str:
        return self._writer().plane

    def _writer(self) -> Any:
        if self._native is None:
            raise UsageError("call begin(schema) first")
        return self._native

    def begin(self, schema: pa.Schema, options: object = None) -> None:
        """Starts an exchange's stream with `schema` (an upload's starts in `do_put`)."""
        if self._native is not None:
            raise UsageError("the stream has begun already")
        self._native = self._start(schema)

    def write_batch(self, batch: Any) -> None:
        """Sends a RecordBatch (or anything with `__arrow_c_array__`)."""
        self._writer().write_batch(batch)

    def write_with_metadata(self, batch: Any, buf: bytes | pa.Buffer) -> None:
        self._writer().write_batch(batch, bytes(buf))

    def write_metadata(self, buf: bytes | pa.Buffer) -> None:
        self._writer().write_metadata(bytes(buf))

    def write_table(self, table: Any, max_chunksize: int | None = None) -> None:
        """Sends a Table, RecordBatchReader or anything with `__arrow_c_stream__`."""
        if max_chunksize is not None and isinstance(table, pa.Table):
            table = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize))
        self._writer().write_stream(table)

    def write(self, table_or_batch: Any) -> None:
        if hasattr(table_or_batch, "__arrow_c_stream__") and not isinstance(table_or_batch, pa.RecordBatch):
            self.write_table(table_or_batch)
        else:
            self.write_batch(table_or_batch)

    def done_writing(self) -> None:
        """Tells the server this side is done; for an upload, waits for its PutResults."""
        if not self._done:
            self._done = True
            self._results = list(self._writer().finish())

    def close(self) -> None:
        if self._native is not None:
            self.done_writing()

    def __enter__(self) -> FlightStreamWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _ExchangeReader(FlightStreamReader):
    """An exchange's reader, whose stream opens once the writer begins."""

    def __init__(self, box: list[Any]) -> None:
        self._box = box

    @property
    def _native(self) -> Any:
        if not self._box:
            raise UsageError("call writer.begin(schema) before reading an exchange")
        return self._box[0]


class FlightClient:
    """A Flight client, as `pyarrow.flight.FlightClient`.

    `key` (else WIRESPEED_KEY) opens the data planes a wirespeed server offers; the fastest
    reachable one carries each call (shm on the same host, then ucx, ofi, tcp). `transport`
    forces one ("grpc", "shm", "tcp", ...). TLS options are not supported.
    """

    def __init__(self, location: str | Location | tuple[str, int], key: Key = None, *, transport: str = "auto",
                 **unsupported: object) -> None:
        for name, value in unsupported.items():
            if value not in (None, False):
                raise UsageError(f"{name}: not supported by wirespeed.flight")
        self._native = _native.FlightClient(_uri(location), _key(key), transport)
        self._endpoints: dict[bytes, bytes] = {}

    def _remember(self, info: FlightInfo) -> FlightInfo:
        # do_get(ticket) then uses the endpoint's data planes without asking again.
        for endpoint in info.endpoints:
            if len(self._endpoints) > 4096:
                self._endpoints.clear()
            self._endpoints[endpoint.ticket.ticket] = endpoint.serialize()
        return info

    def authenticate_basic_token(self, username: str, password: str, options: object = None) -> tuple[bytes, bytes]:
        """Flight's Basic-then-Bearer handshake; later calls carry the token. Returns the
        header pair, as pyarrow does."""
        token = self._native.authenticate(username, password)
        return b"authorization", token.encode()

    def list_flights(self, criteria: bytes = b"", options: object = None) -> Iterator[FlightInfo]:
        return iter([self._remember(FlightInfo.deserialize(i)) for i in self._native.list_flights(criteria)])

    def get_flight_info(self, descriptor: FlightDescriptor, options: object = None) -> FlightInfo:
        return self._remember(FlightInfo.deserialize(self._native.get_flight_info(_descriptor(descriptor))))

    def get_schema(self, descriptor: FlightDescriptor, options: object = None) -> SchemaResult:
        return SchemaResult(self._native.get_schema(_descriptor(descriptor)))

    def do_get(self, ticket: Ticket | FlightEndpoint | bytes, options: object = None) -> FlightStreamReader:
        """Reads a ticket (or an endpoint of a FlightInfo) over the fastest plane offered."""
        if isinstance(ticket, FlightEndpoint):
            return FlightStreamReader(self._native.do_get(ticket.ticket.ticket, ticket.serialize()))
        raw = ticket.ticket if isinstance(ticket, Ticket) else bytes(ticket)
        return FlightStreamReader(self._native.do_get(raw, self._endpoints.get(raw)))

    def do_put(self, descriptor: FlightDescriptor, schema: pa.Schema,
               options: object = None) -> tuple[FlightStreamWriter, FlightMetadataReader]:
        native = self._native.do_put(_descriptor(descriptor), schema)
        writer = FlightStreamWriter(lambda _: native, native)
        return writer, FlightMetadataReader(writer)

    def do_exchange(self, descriptor: FlightDescriptor,
                    options: object = None) -> tuple[FlightStreamWriter, FlightStreamReader]:
        """Returns (writer, reader); the call starts at `writer.begin(schema)`."""
        raw = _descriptor(descriptor)
        box: list[Any] = []

        def start(schema: pa.Schema) -> Any:
            native_writer, native_reader = self._native.do_exchange(raw, schema)
            box.append(native_reader)
            return native_writer

        writer = FlightStreamWriter(start)
        return writer, _ExchangeReader(box)

    def do_action(self, action: Action | str | tuple[str, bytes], options: object = None) -> Iterator[Result]:
        if isinstance(action, str):
            kind, body = action, b""
        elif isinstance(action, tuple):
            kind, body = action[0], bytes(action[1])
        else:
            kind, body = action.type, action.body.to_pybytes()
        return iter([Result(pa.py_buffer(r)) for r in self._native.do_action(kind, body)])

    def list_actions(self, options: object = None) -> list[ActionType]:
        return [ActionType(t, d) for t, d in self._native.list_actions()]

    def close(self) -> None:
        self._native.close()

    def __enter__(self) -> FlightClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(location: str | Location | tuple[str, int], key: Key = None, **kwargs: Any) -> FlightClient:
    """Connects to a Flight server at `location` (`grpc://host:port`)."""
    return FlightClient(location, key, **kwargs)

