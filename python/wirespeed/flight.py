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

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.flight as _pf
from pyarrow.flight import *  # noqa: F401,F403 - pyarrow.flight's whole API is this module's

from . import Key, _native
from ._errors import UsageError
from ._flight_calls import (CancelFlightInfoRequest, CancelFlightInfoResult, CancelStatus, NewerCalls, PollInfo,
                            RenewFlightEndpointRequest)
from ._flight_base import FlightUnauthenticatedError, _app_metadata, _ipc_options, _Reading, _uri
from ._grpc_errors import translating
from ._flight_server import (
    CALL_HEADER,
    DATA_METHODS,
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

__all__ = sorted({n for n in dir(_pf) if not n.startswith("_")} | {
    "DirectoryServer", "serve", "share", "CancelFlightInfoRequest", "CancelFlightInfoResult", "CancelStatus", "PollInfo",
    "RenewFlightEndpointRequest"})

# What the call this thread is starting is for, when it is one of ours: "hello" (asking a
# server about planes) or the data method whose locations it asks for; and the program's
# middleware instances that this data call holds until it ends on its plane.
_ours = threading.local()


@contextmanager
def _our_call(what: str) -> Iterator[_Completion]:
    _ours.call, _ours.held = what, _Completion()
    try:
        yield _ours.held
    finally:
        _ours.call = _ours.held = None


def _our_call_now() -> str | None:
    return getattr(_ours, "call", None)


class _Hello(_pf.ClientMiddlewareFactory):
    """Adds the hello to our own calls and notes whether the server answered it."""

    def __init__(self, planes: Any) -> None:
        self.planes = planes
        self.answered: bool | None = None

    def start_call(self, info: _pf.CallInfo) -> _pf.ClientMiddleware | None:
        ours = _our_call_now()
        return None if ours is None else _HelloCall(self, ours)


class _HelloCall(_pf.ClientMiddleware):
    def __init__(self, factory: _Hello, ours: str) -> None:
        self.factory, self.ours = factory, ours

    def sending_headers(self) -> dict[str, str]:
        return {HELLO_HEADER: self.factory.planes.hello(), CALL_HEADER: self.ours}

    def received_headers(self, headers: dict[str, Any]) -> None:
        if PLANES_HEADER in headers:
            self.factory.answered = True


class _ShownAsMeant(_pf.ClientMiddlewareFactory):
    """The program's middleware factory, shown our calls as pyarrow's client would have made
    them: the question about planes not at all, the action asking for a data call's locations
    as that call, which completes for it when the call does on its plane."""

    def __init__(self, inner: _pf.ClientMiddlewareFactory) -> None:
        self.inner = inner

    def start_call(self, info: _pf.CallInfo) -> _pf.ClientMiddleware | None:
        ours = _our_call_now()
        if ours is None:
            return self.inner.start_call(info)
        if ours == "hello":
            return None
        made = self.inner.start_call(_pf.CallInfo(DATA_METHODS[ours]))
        return None if made is None else _ours.held.hold(made)


class _Completion:
    """The program's middleware instances of one data call on a plane: they hear it completed
    once, when it has (its reader at the end, its writer closed, or an error)."""

    def __init__(self) -> None:
        self._held: list[_pf.ClientMiddleware] = []
        self._lock = threading.Lock()

    def hold(self, instance: _pf.ClientMiddleware) -> _pf.ClientMiddleware:
        self._held.append(instance)
        return _Held(instance, self)

    def done(self, exception: BaseException | None = None) -> None:
        with self._lock:
            held, self._held = self._held, []
        for instance in held:
            instance.call_completed(exception)


class _Held(_pf.ClientMiddleware):
    """A program's middleware instance on the action asking for locations: headers as they
    come, completion when the data call ends (or now, if the action failed)."""

    def __init__(self, inner: _pf.ClientMiddleware, completion: _Completion) -> None:
        self.inner, self.completion = inner, completion

    def sending_headers(self) -> Any:
        return self.inner.sending_headers()

    def received_headers(self, headers: dict[str, Any]) -> None:
        self.inner.received_headers(headers)

    def call_completed(self, exception: BaseException | None) -> None:
        if exception is not None:
            self.completion.done(exception)


class FlightStreamReader(_Reading):
    """A do_get's (or do_exchange's) batches arriving over a data plane, with pyarrow's
    FlightStreamReader methods."""

    def __init__(self, native: Any, fields: list[int] | None = None, completion: _Completion | None = None) -> None:
        self._native, self._fields, self._completion = native, fields or None, completion

    @property
    def plane(self) -> str:
        """The plane carrying the data: shm, ucx, tcp or ofi+<provider>."""
        return self._native.plane

    def cancel(self) -> None:
        self._native.cancel()
        self._ended(_pf.FlightCancelledError("the reader was cancelled"))

    def __enter__(self) -> FlightStreamReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()


class _ExchangeReader(FlightStreamReader):
    """An exchange's reader: it waits for the server's answers only when read, as the server
    may read all its input before it writes (and may answer with metadata before its
    schema)."""

    def __init__(self, pending: Any, fields: list[int] | None = None, completion: _Completion | None = None) -> None:
        self._pending, self._fields, self._completion = pending, fields or None, completion
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
        """Waits for the server's schema (or error, or end), taking none of its batches: a call
        that failed before answering raises its error here."""
        self._native.started()


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
            if result is not None or not writer._done:
                return None if result is None else pa.py_buffer(result)
        # done_writing (maybe on another thread, while we waited) takes the rest.
        writer._finished.wait()
        return pa.py_buffer(writer._results.pop(0)) if writer._results else None


class FlightStreamWriter:
    """The sending half of a do_put or do_exchange over a data plane, with pyarrow's
    FlightStreamWriter methods."""

    def __init__(self, native: Any, exchange: _ExchangeReader | None = None,
                 options: pa.ipc.IpcWriteOptions | None = None, size_limit: int | None = None,
                 completion: _Completion | None = None) -> None:
        self._native, self._exchange, self._completion = native, exchange, completion
        self._options, self._size_limit = options, size_limit
        self._begun = exchange is None  # an upload's schema went with do_put
        self._results: list[bytes] = []
        self._done = False
        self._finished = threading.Event()

    @property
    def plane(self) -> str:
        return self._writer().plane

    def _writer(self) -> Any:
        if not self._begun:
            raise UsageError("call begin(schema) first")
        return self._native

    def begin(self, schema: pa.Schema, options: pa.ipc.IpcWriteOptions | None = None) -> None:
        """Starts an exchange's stream with `schema` (an upload's starts in do_put)."""
        if self._begun:
            raise UsageError("the stream has begun already")
        self._native.begin(schema, _ipc_options(options or self._options))
        self._begun = True

    def _fits(self, batch: Any) -> Any:
        """The batch, if it fits the client's write_size_limit_bytes (as pyarrow checks it)."""
        if self._size_limit and isinstance(batch, pa.RecordBatch):
            size = pa.ipc.get_record_batch_size(batch)
            if size > self._size_limit:
                raise _pf.FlightWriteSizeExceededError(
                    f"IPC payload size ({size}) exceeded soft limit ({self._size_limit})", self._size_limit, size)
        return batch

    def write_batch(self, batch: Any) -> None:
        # No custom_metadata: pyarrow's Flight writers take none (a TypeError), on every plane.
        self._writer().write_batch(self._fits(batch))

    def write_with_metadata(self, batch: Any, buf: bytes | pa.Buffer) -> None:
        self._writer().write_batch(self._fits(batch), _app_metadata(buf))

    def write_metadata(self, buf: bytes | pa.Buffer) -> None:
        """Sends application metadata alone (before `begin` too, as pyarrow allows)."""
        self._native.write_metadata(_app_metadata(buf))

    def write_table(self, table: Any, max_chunksize: int | None = None) -> None:
        if self._size_limit and isinstance(table, pa.Table):
            for batch in table.to_batches(max_chunksize):
                self.write_batch(batch)
            return
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
            try:
                self._results = list(self._native.finish())
            except BaseException as e:
                self._complete(e)
                raise
            finally:
                self._finished.set()
            if self._exchange is None:
                self._complete(None)

    def close(self) -> None:
        self.done_writing()
        if self._exchange is not None:
            try:
                self._exchange._started()
            except BaseException as e:
                self._complete(e)
                raise

    def _complete(self, exception: BaseException | None) -> None:
        if self._completion is not None:
            self._completion.done(exception)

    def __enter__(self) -> FlightStreamWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _unix_authority(location: Any, options: list[tuple[str, Any]] | None) -> list[tuple[str, Any]] | None:
    """Over a Unix socket, requests name localhost as their authority. gRPC's C++ client would
    name the socket's path, which servers on Rust's HTTP/2 (h2, as `wirespeed serve`) refuse
    with PROTOCOL_ERROR (hyperium/h2#487); pyarrow's own servers take either."""
    options = list(options or [])
    if isinstance(location, (str, _pf.Location)) and _uri(location).startswith("grpc+unix://") \
            and not any(name == "grpc.default_authority" for name, _ in options):
        options.append(("grpc.default_authority", "localhost"))
    return options or None


@translating
class FlightClient(NewerCalls, _pf.FlightClient):
    """pyarrow.flight.FlightClient, with `key` (else WIRESPEED_KEY) for the data planes of a
    wirespeed server, and `transport`: "auto" (the fastest plane offered, else gRPC), "grpc",
    or one plane ("shm", "tcp", "ucx", "ofi+tcp", ...) or an error; and the calls pyarrow's
    lacks (poll_flight_info, cancel_flight_info, renew_flight_endpoint, the session options)."""

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
        self._size_limit = write_size_limit_bytes if write_size_limit_bytes and write_size_limit_bytes > 0 else None
        middleware = list(middleware or [])
        if transport != "grpc" and (secret is not None or transport != "auto"):
            if secret is None:
                # As the Rust client and the CLI say it: a missing key is a key's failure.
                raise FlightUnauthenticatedError(
                    f"transport {transport!r}: a data plane needs a key (key= or WIRESPEED_KEY)")
            self._planes = _native.PlaneClient(secret, transport, _address(location))
            self._hello = _Hello(self._planes)
            middleware = [_ShownAsMeant(m) for m in middleware] + [self._hello]
        identity = None if cert_chain is None or private_key is None else (_pem(cert_chain), _pem(private_key))
        self._calls_to = (_uri(location), {
            "roots": None if tls_root_certs is None else _pem(tls_root_certs), "identity": identity,
            "server_name": override_hostname, "skip_verification": bool(disable_server_verification)})
        super().__init__(location, tls_root_certs=tls_root_certs, cert_chain=cert_chain, private_key=private_key,
                         override_hostname=override_hostname, middleware=middleware or None,
                         write_size_limit_bytes=write_size_limit_bytes,
                         disable_server_verification=disable_server_verification,
                         generic_options=_unix_authority(location, generic_options))

    @classmethod
    def connect(cls, location: Any, tls_root_certs: bytes | None = None, cert_chain: bytes | None = None,
                private_key: bytes | None = None, override_hostname: str | None = None,
                disable_server_verification: bool | None = None) -> FlightClient:
        return cls(location, tls_root_certs=tls_root_certs, cert_chain=cert_chain, private_key=private_key,
                   override_hostname=override_hostname, disable_server_verification=disable_server_verification)

    def _locations(self, method: str, target: bytes, options: Any) -> tuple[list[str], _Completion]:
        """Where the server would run this call, if it serves data planes (asked only of a
        server that answered our hello, with ListActions, once, if no call has yet), and the
        program's middleware instances that the call then holds."""
        hello = self._hello
        if hello is None:
            return [], _Completion()
        if hello.answered is None:
            try:
                with _our_call("hello"):
                    super().list_actions(options)
            except (_pf.FlightError, pa.ArrowException) as e:
                if self._transport != "auto":
                    raise _pf.FlightUnavailableError(
                        f"transport {self._transport!r}: the server's ListActions failed ({type(e).__name__}), so whether it "
                        "serves data planes is unknown until another call to it succeeds") from e
                return [], _Completion()  # unknown yet: this call goes over gRPC, the next asks again
            hello.answered = bool(hello.answered)
        if not hello.answered:
            return [], _Completion()
        with _our_call(method) as completion:
            results = super().do_action(_pf.Action(_PLANE_ACTION[method], target), options)
            return [r.body.to_pybytes().decode() for r in results], completion

    def do_get(self, ticket: _pf.Ticket, options: _pf.FlightCallOptions | None = None) -> Any:
        if self._planes is not None:
            uris, completion = self._locations("get", ticket.ticket, options)
            native = _opened(completion, lambda: self._planes.get(uris, ticket.ticket))
            if native is not None:
                return FlightStreamReader(native, _included_fields(options), completion)
        return super().do_get(ticket, options)

    def do_put(self, descriptor: _pf.FlightDescriptor, schema: pa.Schema,
               options: _pf.FlightCallOptions | None = None) -> tuple[Any, Any]:
        if self._planes is not None and isinstance(schema, pa.Schema):
            raw = descriptor.serialize()
            uris, completion = self._locations("put", raw, options)
            native = _opened(completion, lambda: self._planes.put(uris, raw, schema,
                                                                   _ipc_options(_write_options(options))))
            if native is not None:
                writer = FlightStreamWriter(native, size_limit=self._size_limit, completion=completion)
                return writer, FlightMetadataReader(writer)
        return super().do_put(descriptor, schema, options)

    def do_exchange(self, descriptor: _pf.FlightDescriptor,
                    options: _pf.FlightCallOptions | None = None) -> tuple[Any, Any]:
        if self._planes is not None:
            raw = descriptor.serialize()
            uris, completion = self._locations("exchange", raw, options)
            pair = _opened(completion, lambda: self._planes.exchange(uris, raw))
            if pair is not None:
                native, pending = pair
                reader = _ExchangeReader(pending, _included_fields(options), completion)
                writer = FlightStreamWriter(native, reader, _write_options(options), self._size_limit, completion)
                return writer, reader
        return super().do_exchange(descriptor, options)


# The action that hands out a call's locations, by method, as the Rust side names it.
_PLANE_ACTION = {method: action for action, method in _native.PLANE_ACTIONS.items()}


def _opened(completion: _Completion, open_call: Any) -> Any:
    """The plane call `open_call` opens, or None (gRPC will carry it, with middleware of its
    own): the held instances then complete at once, as they do if opening fails."""
    try:
        opened = open_call()
    except BaseException as e:
        completion.done(e)
        raise
    if opened is None:
        completion.done()
    return opened


def _pem(given: str | bytes) -> bytes:
    return given.encode() if isinstance(given, str) else bytes(given)


def _write_options(options: _pf.FlightCallOptions | None) -> pa.ipc.IpcWriteOptions | None:
    return None if options is None else options.write_options


def _included_fields(options: _pf.FlightCallOptions | None) -> list[int] | None:
    """The fields a reader keeps, as the call's IpcReadOptions name them (all if none)."""
    read = None if options is None else options.read_options
    return list(read.included_fields) if read is not None and read.included_fields else None


def connect(location: Any, **kwargs: Any) -> FlightClient:
    """pyarrow.flight.connect, with FlightClient's `key` and `transport`."""
    return FlightClient(location, **kwargs)
