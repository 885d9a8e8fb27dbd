"""`pyarrow.flight`, whose data can travel over shared memory (same host), UCX, libfabric or
TCP instead of gRPC: change the import, keep the program.

Everything here is pyarrow.flight's own (the same classes, not copies), except FlightClient
and FlightServerBase, which are pyarrow's with a data-plane key added (`key=`, else the
WIRESPEED_KEY environment variable). Without a key they behave as pyarrow's do, to the byte.
With one, a client asks the server once, in a way any Flight server answers harmlessly,
whether it serves data planes; if it does, DoGet, DoPut and DoExchange run on the fastest one
this process can reach, everything else (and every call to any other server) on gRPC.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.flight as _pf
from pyarrow.flight import *  # noqa: F401,F403 - pyarrow.flight's whole API is this module's

from . import Key, _native
from ._errors import UsageError
from ._flight_base import _Reading
from ._flight_server import (
    HELLO_HEADER,
    PLANES_HEADER,
    DirectoryServer,
    FlightServerBase,
    GeneratorStream,
    RecordBatchStream,
    _address,
    _key_or_env,
    serve,
    share,
)

__all__ = sorted({n for n in dir(_pf) if not n.startswith("_")} | {"DirectoryServer", "serve", "share"})

class _Hello(_pf.ClientMiddlewareFactory):
    """Adds the hello to each call and notes whether the server answered it."""

    def __init__(self, planes: Any) -> None:
        self.planes = planes
        self.answered: bool | None = None

    def start_call(self, info: _pf.CallInfo) -> _pf.ClientMiddleware:
        return _HelloCall(self)


class _HelloCall(_pf.ClientMiddleware):
    def __init__(self, factory: _Hello) -> None:
        self.factory = factory

    def sending_headers(self) -> dict[str, str]:
        return {HELLO_HEADER: self.factory.planes.hello()}

    def received_headers(self, headers: dict[str, Any]) -> None:
        if PLANES_HEADER in headers:
            self.factory.answered = True


class FlightStreamReader(_Reading):
    """A do_get's (or do_exchange's) batches arriving over a data plane, with pyarrow's
    FlightStreamReader methods."""

    def __init__(self, native: Any) -> None:
        self._native = native

    @property
    def plane(self) -> str:
        """The plane carrying the data: shm, ucx, tcp or ofi+<provider>."""
        return self._native.plane

    def cancel(self) -> None:
        self._native.cancel()

    def __enter__(self) -> FlightStreamReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()


class _ExchangeReader(FlightStreamReader):
    """An exchange's reader: it waits for the server's schema only when first read, as the
    server may read all its input before it writes."""

    def __init__(self, pending: Any) -> None:
        self._pending = pending
        self._opened: Any = None
        self._failed: BaseException | None = None

    @property
    def _native(self) -> Any:
        if self._opened is None:
            if self._failed is not None:
                raise self._failed  # the call's error, again
            try:
                self._opened = self._pending.open()
            except BaseException as e:
                self._failed = e
                raise
        return self._opened

    def _started(self) -> None:
        """Waits for the server's schema (or error), taking none of its batches: a call that
        failed before answering raises its error here."""
        _ = self._native


class FlightMetadataReader:
    """A do_put's PutResults over a data plane: while writing goes on, `read` waits for the
    next (a server may acknowledge each batch); after `done_writing` it gives the rest, then
    None."""

    def __init__(self, writer: FlightStreamWriter) -> None:
        self._writer = writer

    def read(self) -> pa.Buffer | None:
        writer = self._writer
        if not writer._done:
            result = writer._writer().next_result()
            return None if result is None else pa.py_buffer(result)
        return pa.py_buffer(writer._results.pop(0)) if writer._results else None


class FlightStreamWriter:
    """The sending half of a do_put or do_exchange over a data plane, with pyarrow's
    FlightStreamWriter methods."""

    def __init__(self, native: Any, exchange: _ExchangeReader | None = None) -> None:
        self._native, self._exchange = native, exchange
        self._begun = exchange is None  # an upload's schema went with do_put
        self._results: list[bytes] = []
        self._done = False

    @property
    def plane(self) -> str:
        return self._writer().plane

    def _writer(self) -> Any:
        if not self._begun:
            raise UsageError("call begin(schema) first")
        return self._native

    def begin(self, schema: pa.Schema, options: object = None) -> None:
        """Starts an exchange's stream with `schema` (an upload's starts in do_put)."""
        if self._begun:
            raise UsageError("the stream has begun already")
        self._native.begin(schema)
        self._begun = True

    def write_batch(self, batch: Any, custom_metadata: object = None) -> None:
        self._writer().write_batch(batch)

    def write_with_metadata(self, batch: Any, buf: bytes | pa.Buffer) -> None:
        self._writer().write_batch(batch, bytes(buf))

    def write_metadata(self, buf: bytes | pa.Buffer) -> None:
        self._writer().write_metadata(bytes(buf))

    def write_table(self, table: Any, max_chunksize: int | None = None) -> None:
        if max_chunksize is not None and isinstance(table, pa.Table):
            table = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize))
        self._writer().write_stream(table)

    def write(self, table_or_batch: Any) -> None:
        if isinstance(table_or_batch, pa.RecordBatch):
            self.write_batch(table_or_batch)
        else:
            self.write_table(table_or_batch)

    def done_writing(self) -> None:
        """Tells the server this side is done; for an upload, waits for its PutResults."""
        if not self._done:
            self._done = True
            self._results = list(self._native.finish())

    def close(self) -> None:
        self.done_writing()
        if self._exchange is not None:
            self._exchange._started()

    def __enter__(self) -> FlightStreamWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FlightClient(_pf.FlightClient):
    """pyarrow.flight.FlightClient, with `key` (else WIRESPEED_KEY) for the data planes of a
    wirespeed server, and `transport`: "auto" (the fastest plane offered, else gRPC), "grpc",
    or one plane ("shm", "tcp", "ucx", "ofi+tcp", ...) or an error."""

    def __init__(self, location: Any, *, tls_root_certs: bytes | None = None, cert_chain: bytes | None = None,
                 private_key: bytes | None = None, override_hostname: str | None = None,
                 middleware: list[_pf.ClientMiddlewareFactory] | None = None,
                 write_size_limit_bytes: int | None = None, disable_server_verification: bool | None = None,
                 generic_options: list[tuple[str, Any]] | None = None, key: Key = None,
                 transport: str = "auto") -> None:
        secret = _key_or_env(key)
        self._planes: Any = None
        self._hello: _Hello | None = None
        self._transport = transport
        middleware = list(middleware or [])
        if transport != "grpc" and (secret is not None or transport != "auto"):
            if secret is None:
                raise UsageError(f"transport {transport!r}: a data plane needs a key (key= or WIRESPEED_KEY)")
            self._planes = _native.PlaneClient(secret, transport, _address(location))
            self._hello = _Hello(self._planes)
            middleware.append(self._hello)
        super().__init__(location, tls_root_certs=tls_root_certs, cert_chain=cert_chain, private_key=private_key,
                         override_hostname=override_hostname, middleware=middleware or None,
                         write_size_limit_bytes=write_size_limit_bytes,
                         disable_server_verification=disable_server_verification, generic_options=generic_options)

    @classmethod
    def connect(cls, location: Any, tls_root_certs: bytes | None = None, cert_chain: bytes | None = None,
                private_key: bytes | None = None, override_hostname: str | None = None,
                disable_server_verification: bool | None = None) -> FlightClient:
        return cls(location, tls_root_certs=tls_root_certs, cert_chain=cert_chain, private_key=private_key,
                   override_hostname=override_hostname, disable_server_verification=disable_server_verification)

    def _locations(self, method: str, target: bytes, options: Any) -> list[str]:
        """Where the server would run this call, if it serves data planes: asked only of a
        server that answered our hello (with ListActions, once, if no call has yet)."""
        hello = self._hello
        if hello is None:
            return []
        if hello.answered is None:
            try:
                super().list_actions(options)
            except (_pf.FlightError, pa.ArrowException) as e:
                if self._transport != "auto":
                    raise _pf.FlightUnavailableError(
                        f"transport {self._transport!r}: the server's ListActions failed ({type(e).__name__}), so whether it "
                        "serves data planes is unknown until another call to it succeeds") from e
                return []  # unknown yet: this call goes over gRPC, and the next one asks again
            hello.answered = bool(hello.answered)
        if not hello.answered:
            return []
        results = super().do_action(_pf.Action(f"wirespeed.{method}", target), options)
        return [r.body.to_pybytes().decode() for r in results]

    def do_get(self, ticket: _pf.Ticket, options: _pf.FlightCallOptions | None = None) -> Any:
        if self._planes is not None:
            native = self._planes.get(self._locations("get", ticket.ticket, options), ticket.ticket)
            if native is not None:
                return FlightStreamReader(native)
        return super().do_get(ticket, options)

    def do_put(self, descriptor: _pf.FlightDescriptor, schema: pa.Schema,
               options: _pf.FlightCallOptions | None = None) -> tuple[Any, Any]:
        if self._planes is not None and isinstance(schema, pa.Schema):
            raw = descriptor.serialize()
            native = self._planes.put(self._locations("put", raw, options), raw, schema)
            if native is not None:
                writer = FlightStreamWriter(native)
                return writer, FlightMetadataReader(writer)
        return super().do_put(descriptor, schema, options)

    def do_exchange(self, descriptor: _pf.FlightDescriptor,
                    options: _pf.FlightCallOptions | None = None) -> tuple[Any, Any]:
        if self._planes is not None:
            raw = descriptor.serialize()
            pair = self._planes.exchange(self._locations("exchange", raw, options), raw)
            if pair is not None:
                native, pending = pair
                reader = _ExchangeReader(pending)
                return FlightStreamWriter(native, reader), reader
        return super().do_exchange(descriptor, options)


def connect(location: Any, **kwargs: Any) -> FlightClient:
    """pyarrow.flight.connect, with FlightClient's `key` and `transport`."""
    return FlightClient(location, **kwargs)
