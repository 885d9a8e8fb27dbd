"""wirespeed.flight's server side: FlightServerBase for services written in Python, and
`serve` for the `wirespeed serve` service in this process."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.flight as _pf
from pyarrow.flight import Action, ActionType, FlightDescriptor, FlightInfo, Location, Result, SchemaResult, Ticket

from . import Key, _key, _native
from ._errors import UsageError
from ._flight_base import _Reading, _uri

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
    """pyarrow's FlightMetadataWriter: a PutResult for the client, sent once the handler asks
    for the next message (or returns), so that a client waiting for each has it."""

    def __init__(self, native: Any) -> None:
        self._native = native

    def write(self, message: bytes | pa.Buffer) -> None:
        self._native.write(bytes(message))


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

    def do_put(self, descriptor: bytes, reader: Any, writer: Any) -> None:
        descriptor_ = FlightDescriptor.deserialize(descriptor)
        self.server.do_put(ServerCallContext(), descriptor_, _ServerReader(reader), _MetadataWriter(writer))

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

