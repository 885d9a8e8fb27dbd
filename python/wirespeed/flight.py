"""Arrow Flight shaped like `pyarrow.flight`: change the import and the data of every call
can travel over shared memory (same host), UCX, libfabric or TCP instead of gRPC.

The control plane is standard gRPC, so the client talks to any Flight server and any Flight
client talks to the server. Descriptors, tickets, FlightInfo and the rest are pyarrow.flight's
own classes. A data plane needs a key both ends hold (`key=` or WIRESPEED_KEY); without one,
calls go over gRPC.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple, Union

import pyarrow as pa
import pyarrow.flight as _pf
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

from . import _native
from ._errors import AuthenticationError, ConnectionError, Error, TimeoutError, UsageError

__all__ = [
    "Action",
    "ActionType",
    "DescriptorType",
    "FlightCancelledError",
    "FlightClient",
    "FlightDescriptor",
    "FlightEndpoint",
    "FlightError",
    "FlightInfo",
    "FlightInternalError",
    "FlightMetadataReader",
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

Key = Union[str, bytes, None]


# Errors: each is pyarrow.flight's class of the same name (or pyarrow's for the code), so
# `except pyarrow.flight.FlightUnavailableError` keeps working, and a wirespeed.Error.


class FlightError(Error, _pf.FlightError):
    """A Flight call failed; the subclass says how, by its gRPC status code."""

    def __init__(self, message: str = "", extra_info: bytes = b"") -> None:
        _pf.FlightError.__init__(self, message, extra_info)


class FlightServerError(FlightError, _pf.FlightServerError):
    pass


class FlightInternalError(FlightError, _pf.FlightInternalError):
    pass


class FlightUnavailableError(FlightError, ConnectionError, _pf.FlightUnavailableError):
    exit_code = 4


class FlightTimedOutError(FlightError, TimeoutError, _pf.FlightTimedOutError):
    exit_code = 4


class FlightCancelledError(FlightError, _pf.FlightCancelledError):
    pass


class FlightUnauthenticatedError(FlightError, AuthenticationError, _pf.FlightUnauthenticatedError):
    exit_code = 3


class FlightUnauthorizedError(FlightError, AuthenticationError, _pf.FlightUnauthorizedError):
    exit_code = 3


class FlightNotFoundError(FlightError, pa.ArrowKeyError):
    """NOT_FOUND, which pyarrow raises as ArrowKeyError."""


class FlightInvalidArgumentError(FlightError, UsageError, pa.ArrowInvalid):
    """INVALID_ARGUMENT, which pyarrow raises as ArrowInvalid."""


class FlightNotImplementedError(FlightError, pa.ArrowNotImplementedError):
    """UNIMPLEMENTED, which pyarrow raises as ArrowNotImplementedError."""


class FlightAlreadyExistsError(FlightError, pa.ArrowException):
    pass


# The status code a server handler's exception travels as: pyarrow's classes first.
_STATUS = [
    ((_pf.FlightUnauthenticatedError,), "unauthenticated"),
    ((_pf.FlightUnauthorizedError, PermissionError), "permission_denied"),
    ((_pf.FlightUnavailableError,), "unavailable"),
    ((_pf.FlightTimedOutError, TimeoutError), "deadline_exceeded"),
    ((_pf.FlightCancelledError,), "cancelled"),
    ((FlightAlreadyExistsError, FileExistsError), "already_exists"),
    ((KeyError, FileNotFoundError), "not_found"),
    ((NotImplementedError,), "unimplemented"),
    ((ValueError, TypeError), "invalid_argument"),
]


def _status_of(e: BaseException) -> tuple[str, str]:
    for classes, code in _STATUS:
        if isinstance(e, classes):
            message = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
            return code, str(message)
    return "internal", f"{type(e).__name__}: {e}"


def _key(key: Key) -> bytes | None:
    return key.encode() if isinstance(key, str) else key


def _uri(location: str | Location | tuple[str, int]) -> str:
    if isinstance(location, tuple):
        return f"grpc://{location[0]}:{location[1]}"
    if isinstance(location, Location):
        return location.uri.decode()
    return location


def _descriptor(d: FlightDescriptor | bytes | str) -> bytes:
    if isinstance(d, FlightDescriptor):
        return d.serialize()
    return FlightDescriptor.for_path(d).serialize() if isinstance(d, str) else FlightDescriptor.for_command(d).serialize()


class FlightStreamChunk(NamedTuple):
    """One message of a stream: a batch, application metadata, or both."""

    data: pa.RecordBatch | None
    app_metadata: pa.Buffer | None


def _chunk(raw: tuple[Any, Any] | None) -> FlightStreamChunk:
    if raw is None:
        raise StopIteration
    batch, meta = raw
    return FlightStreamChunk(batch, None if meta is None else pa.py_buffer(meta))


class _Reading:
    """What client and server readers share: pyarrow's MetadataRecordBatchReader methods."""

    _native: Any

    @property
    def schema(self) -> pa.Schema:
        return self._native.schema

    def read_chunk(self) -> FlightStreamChunk:
        """The next message; raises StopIteration at the end, as pyarrow's does."""
        return _chunk(self._native.read_chunk())

    def read_all(self) -> pa.Table:
        """The remaining batches as a Table (blocking; Ctrl-C interrupts it)."""
        return self._native.read_all()

    def read_pandas(self, **options: Any) -> Any:
        return self.read_all().to_pandas(**options)

    def to_reader(self) -> pa.RecordBatchReader:
        """The remaining batches as a pyarrow RecordBatchReader, without a copy."""
        return pa.RecordBatchReader.from_stream(self)

    def __iter__(self) -> Iterator[FlightStreamChunk]:
        while (raw := self._native.read_chunk()) is not None:
            yield _chunk(raw)

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        """The Arrow PyCapsule interface: `pyarrow.table(reader)`, polars and duckdb take the
        remaining batches without a copy."""
        return self._native.__arrow_c_stream__(requested_schema)


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
    """The server's PutResults of a `do_put`, available once writing is done."""

    def __init__(self, writer: FlightStreamWriter) -> None:
        self._writer = writer

    def read(self) -> pa.Buffer | None:
        results = self._writer._results
        return pa.py_buffer(results.pop(0)) if results else None


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

    def __init__(self, writer: FlightStreamWriter, box: list[Any]) -> None:
        self._writer, self._box = writer, box

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
        return writer, _ExchangeReader(writer, box)

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


# The server.


class RecordBatchStream:
    """What `do_get` may return, as in pyarrow: a Table or RecordBatchReader to send."""

    def __init__(self, data_source: Any, options: object = None) -> None:
        self.data_source = data_source

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        return self.data_source.__arrow_c_stream__(requested_schema)


class GeneratorStream:
    """What `do_get` may return, as in pyarrow: `schema` and a generator of RecordBatches or
    Tables (application metadata in (batch, metadata) pairs is not sent)."""

    def __init__(self, schema: pa.Schema, generator: Iterable[Any], options: object = None) -> None:
        self.schema, self.generator = schema, generator

    def _batches(self) -> Iterator[pa.RecordBatch]:
        for item in self.generator:
            item = item[0] if isinstance(item, tuple) else item
            if isinstance(item, pa.Table):
                yield from item.to_batches()
            else:
                yield item

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        reader = pa.RecordBatchReader.from_batches(self.schema, self._batches())
        return reader.__arrow_c_stream__(requested_schema)


def share(data: Any) -> pa.Table:
    """`data` (a Table, RecordBatchReader or any Arrow stream) copied once into sealed shared
    memory. A table a server keeps and serves many times belongs there: sent over the shm plane
    it travels as a reference, and clients on this host map it instead of receiving a copy
    (other planes send the bytes as usual). The memory is read-only for good."""
    return _native.share_table(data)


class ServerCallContext:
    """Per-call state, as pyarrow's (without middleware)."""

    def peer_identity(self) -> bytes:
        return b""

    def peer(self) -> str:
        return ""

    def is_cancelled(self) -> bool:
        return False


class _ServerReader(_Reading):
    def __init__(self, native: Any) -> None:
        self._native = native


class _MetadataWriter:
    """pyarrow's FlightMetadataWriter: PutResults for the client, sent when the upload ends."""

    def __init__(self) -> None:
        self.results: list[bytes] = []

    def write(self, message: bytes | pa.Buffer) -> None:
        self.results.append(bytes(message))


class _ExchangeWriter:
    """pyarrow's MetadataRecordBatchWriter for a server's side of an exchange."""

    def __init__(self, native: Any) -> None:
        self._native = native

    def begin(self, schema: pa.Schema, options: object = None) -> None:
        self._native.begin(schema)

    def write_batch(self, batch: Any) -> None:
        self._native.write_batch(batch)

    def write_with_metadata(self, batch: Any, buf: bytes | pa.Buffer) -> None:
        self._native.write_batch(batch, bytes(buf))

    def write_metadata(self, buf: bytes | pa.Buffer) -> None:
        self._native.write_metadata(bytes(buf))

    def write_table(self, table: pa.Table, max_chunksize: int | None = None) -> None:
        for batch in table.to_batches(max_chunksize):
            self._native.write_batch(batch)

    def write(self, table_or_batch: Any) -> None:
        if isinstance(table_or_batch, pa.Table):
            self.write_table(table_or_batch)
        else:
            self.write_batch(table_or_batch)

    def close(self) -> None:
        self._native.close()


class _Dispatcher:
    """What the native server calls: protobuf bytes in and out, the user's methods between."""

    def __init__(self, server: FlightServerBase) -> None:
        self.server = server

    def list_flights(self, criteria: bytes) -> list[bytes]:
        return [info.serialize() for info in self.server.list_flights(ServerCallContext(), criteria)]

    def get_flight_info(self, descriptor: bytes) -> bytes:
        return self.server.get_flight_info(ServerCallContext(), FlightDescriptor.deserialize(descriptor)).serialize()

    def get_schema(self, descriptor: bytes) -> pa.Schema:
        result = self.server.get_schema(ServerCallContext(), FlightDescriptor.deserialize(descriptor))
        return result.schema if isinstance(result, SchemaResult) else result

    def do_get(self, ticket: bytes) -> Any:
        stream = self.server.do_get(ServerCallContext(), Ticket(ticket))
        if isinstance(stream, (_pf.RecordBatchStream, _pf.GeneratorStream)):
            raise TypeError("do_get returned a pyarrow.flight stream; return wirespeed.flight's, or the table itself")
        if isinstance(stream, pa.RecordBatch):
            stream = pa.Table.from_batches([stream])
        if not hasattr(stream, "__arrow_c_stream__"):
            raise TypeError(f"do_get returned {type(stream).__name__}, not a Table or an Arrow stream")
        return stream

    def do_put(self, descriptor: bytes, reader: Any) -> list[bytes]:
        writer = _MetadataWriter()
        self.server.do_put(ServerCallContext(), FlightDescriptor.deserialize(descriptor), _ServerReader(reader), writer)
        return writer.results

    def do_exchange(self, descriptor: bytes, reader: Any, writer: Any) -> None:
        descriptor_ = FlightDescriptor.deserialize(descriptor)
        self.server.do_exchange(ServerCallContext(), descriptor_, _ServerReader(reader), _ExchangeWriter(writer))

    def do_action(self, kind: str, body: bytes) -> list[bytes]:
        results = self.server.do_action(ServerCallContext(), Action(kind, body)) or []
        return [r.body.to_pybytes() if isinstance(r, Result) else bytes(r) for r in results]

    def list_actions(self) -> list[tuple[str, str]]:
        return [(a[0], a[1]) for a in self.server.list_actions(ServerCallContext())]


def _listen(location: str | Location | tuple[str, int] | None) -> str:
    """`host:port` from a gRPC location."""
    listen = _uri(location or "grpc://127.0.0.1:0")
    if "://" in listen:
        scheme, listen = listen.split("://", 1)
        if scheme not in ("grpc", "grpc+tcp"):
            raise UsageError(f"{scheme}://: wirespeed.flight serves grpc://host:port")
    return listen


class _Running:
    """A started server: where it listens, and how to wait for it and stop it."""

    _native: Any
    _host: str

    @property
    def port(self) -> int:
        return self._native.port

    @property
    def location(self) -> str:
        """`grpc://host:port` for clients (127.0.0.1 for a server on every address)."""
        host = "127.0.0.1" if self._host in ("0.0.0.0", "") else self._host
        return f"grpc://{host}:{self.port}"

    @property
    def planes(self) -> list[tuple[str, str]]:
        """The data planes served, as (name, listener URL)."""
        return self._native.planes

    def serve(self) -> None:
        """Blocks until `shutdown` (from another thread) or Ctrl-C."""
        self._native.wait()

    def run(self) -> None:
        self.serve()

    def wait(self) -> None:
        self.serve()

    def shutdown(self) -> None:
        self._native.shutdown()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class FlightServerBase(_Running):
    """A Flight service, as `pyarrow.flight.FlightServerBase`: subclass it and override the
    calls. It serves on gRPC at `location` and, with a `key` (else WIRESPEED_KEY), on the data
    planes too (`planes`: default shm, ucx where built, tcp). Handlers run on many threads at
    once; data moves without the GIL. `password` asks clients for Flight's Basic auth."""

    def __init__(self, location: str | Location | tuple[str, int] | None = None, auth_handler: object = None, *,
                 key: Key = None, planes: list[str] | None = None, password: str | None = None,
                 handler_threads: int = 64, **unsupported: object) -> None:
        if auth_handler is not None:
            raise UsageError("auth_handler: not supported by wirespeed.flight; pass password= for Basic auth")
        for name, value in unsupported.items():
            if value not in (None, False):
                raise UsageError(f"{name}: not supported by wirespeed.flight")
        listen = _listen(location)
        self._native = _native.FlightServer(_Dispatcher(self), listen, _key(key), planes, password, handler_threads)
        self._host = listen.rsplit(":", 1)[0]

    def list_flights(self, context: ServerCallContext, criteria: bytes) -> Iterable[FlightInfo]:
        return []

    def get_flight_info(self, context: ServerCallContext, descriptor: FlightDescriptor) -> FlightInfo:
        raise NotImplementedError("GetFlightInfo is not implemented")

    def get_schema(self, context: ServerCallContext, descriptor: FlightDescriptor) -> SchemaResult | pa.Schema:
        return SchemaResult(self.get_flight_info(context, descriptor).schema)

    def do_get(self, context: ServerCallContext, ticket: Ticket) -> Any:
        raise NotImplementedError("DoGet is not implemented")

    def do_put(self, context: ServerCallContext, descriptor: FlightDescriptor, reader: Any, writer: Any) -> None:
        raise NotImplementedError("DoPut is not implemented")

    def do_exchange(self, context: ServerCallContext, descriptor: FlightDescriptor, reader: Any, writer: Any) -> None:
        raise NotImplementedError("DoExchange is not implemented")

    def do_action(self, context: ServerCallContext, action: Action) -> Iterable[Result | bytes] | None:
        raise NotImplementedError(f"unknown action {action.type!r}")

    def list_actions(self, context: ServerCallContext) -> Iterable[ActionType | tuple[str, str]]:
        return []


class DirectoryServer(_Running):
    """`wirespeed serve` running in this process; see `serve`."""

    def __init__(self, native: Any, host: str) -> None:
        self._native, self._host = native, host


def serve(directory: str | os.PathLike[str], location: str | Location | tuple[str, int] | None = None,
          key: Key = None, *, planes: list[str] | None = None, password: str | None = None, cache_mb: int = 0,
          handler_threads: int = 64) -> DirectoryServer:
    """Serves the Arrow IPC and Parquet files under `directory` as flights (keyed by relative
    path), as `wirespeed serve` does: uploads land whole or not at all, `cache_mb` keeps
    decoded tables in memory. Returns the running server; `serve()` on it blocks."""
    listen = _listen(location)
    native = _native.serve_directory(os.fspath(directory), listen, _key(key), planes, password, handler_threads,
                                     cache_mb)
    return DirectoryServer(native, listen.rsplit(":", 1)[0])
