"""wirespeed.flight's server side: FlightServerBase (pyarrow's, with data planes beside its
gRPC), the stream classes the planes can read back, and `serve` for the `wirespeed serve`
service in this process."""

from __future__ import annotations

import functools
import os
import socket
import threading
import time
import urllib.parse
import weakref
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.flight as _pf

from . import Key, _key, _native
from ._errors import UsageError
from ._flight_base import _app_metadata, _ipc_options, _Reading, _uri
from ._flight_drain import GATE, Gate
from ._flight_calls import CancelFlightInfoRequest, CancelFlightInfoResult, RenewFlightEndpointRequest

# The discovery handshake's names, as the Rust client and server define them.
HELLO_HEADER: str = _native.HELLO_HEADER
CALL_HEADER: str = _native.CALL_HEADER
PLANES_HEADER: str = _native.PLANES_HEADER
_PLANE_ACTIONS: dict[str, str] = _native.PLANE_ACTIONS
# The middleware key under which a call that said hello is marked.
_MIDDLEWARE = "wirespeed.hello"
# The data call that a DoAction asking for its locations stands for.
DATA_METHODS = {"get": _pf.FlightMethod.DO_GET, "put": _pf.FlightMethod.DO_PUT,
                "exchange": _pf.FlightMethod.DO_EXCHANGE}
# How long a grant's control-plane call is kept for the data-plane call it opens (the grant's
# own life), and how many such calls at most.
_GRANT_LIFE = 3600.0
_GRANTS_KEPT = 4096


def _key_or_env(key: Key) -> bytes | None:
    """The key given, else WIRESPEED_KEY, else none."""
    if key is not None:
        return _key(key)
    return os.environb.get(b"WIRESPEED_KEY") or None


class RecordBatchStream(_pf.RecordBatchStream):
    """pyarrow.flight.RecordBatchStream, which a data plane can also send."""

    def __init__(self, data_source: Any, options: Any = None) -> None:
        super().__init__(data_source, options)
        self._source = data_source


class GeneratorStream(_pf.GeneratorStream):
    """pyarrow.flight.GeneratorStream, which a data plane can also send, (batch, metadata)
    pairs included."""

    def __init__(self, schema: pa.Schema, generator: Any, options: Any = None) -> None:
        generator = iter(generator)
        super().__init__(schema, generator, options)
        self._schema, self._generator = schema, generator


def _payloads(item: Any) -> Iterator[tuple[Any, Any]]:
    """What a GeneratorStream may yield, as (batch or None, metadata or None) pairs."""
    if isinstance(item, tuple):
        batch, metadata = item
        yield batch, None if metadata is None else _app_metadata(metadata)
    elif isinstance(item, pa.RecordBatch):
        yield item, None
    elif isinstance(item, RecordBatchStream):
        yield from _payloads(item._source)
    elif isinstance(item, pa.Table):
        for batch in item.to_batches():
            yield batch, None
    elif isinstance(item, pa.RecordBatchReader):
        for batch in item:
            yield batch, None
    else:
        raise TypeError(f"a GeneratorStream yielded {type(item).__name__}")


# How many items in a row a GeneratorStream may yield with nothing in them, as pyarrow's allows.
_EMPTY_ATTEMPTS = 128


def _generated(generator: Any) -> Iterator[tuple[Any, Any]]:
    """A GeneratorStream's (batch, metadata) pairs; a generator that keeps yielding empty
    tables fails as pyarrow's server fails it."""
    empty = 0
    for item in generator:
        sent = False
        for pair in _payloads(item):
            sent = True
            yield pair
        empty = 0 if sent else empty + 1
        if empty >= _EMPTY_ATTEMPTS:
            raise RuntimeError("While getting next payload, ran out of attempts to get something to send "
                               "(application server implementation error)")


def _output(stream: Any) -> Any:
    """A do_get's answer as the data plane sends it: an Arrow stream, or (schema, pairs)."""
    if isinstance(stream, RecordBatchStream):
        return stream._source
    if isinstance(stream, GeneratorStream):
        return stream._schema, _generated(stream._generator)
    if isinstance(stream, _pf.FlightDataStream):
        raise TypeError("do_get returned a pyarrow.flight stream, which a data plane cannot read: return "
                        "wirespeed.flight's RecordBatchStream or GeneratorStream (the same classes, subclassed)")
    if isinstance(stream, pa.RecordBatch):
        return pa.Table.from_batches([stream])
    if not hasattr(stream, "__arrow_c_stream__"):
        raise TypeError(f"do_get returned {type(stream).__name__}, not a FlightDataStream")
    return stream


def share(data: Any) -> pa.Table:
    """`data` (a Table, RecordBatchReader or any Arrow stream) copied once into sealed shared
    memory. A table a server keeps and serves many times belongs there: sent over the shm plane
    it travels as a reference, and clients on this host map it instead of receiving a copy
    (other planes send the bytes as usual). The memory is read-only for good."""
    return _native.share_table(data)


class _Granted(NamedTuple):
    """What a data-plane call takes over from the control-plane call that granted it."""

    middleware: dict[str, Any]
    peer: str
    identity: bytes
    at: float


class _Grants:
    """The granting calls of data-plane calls not yet come, by grant; bounded in number and
    age, each taken by its call."""

    def __init__(self) -> None:
        self._kept: OrderedDict[str, _Granted] = OrderedDict()
        self._lock = threading.Lock()

    def keep(self, grant: str, context: Any, keys: list[str]) -> None:
        granted = _Granted({k: context.get_middleware(k) for k in keys}, context.peer(), context.peer_identity(),
                           time.monotonic())
        dropped = []
        with self._lock:
            self._kept[grant] = granted
            while self._kept and (len(self._kept) > _GRANTS_KEPT
                                  or next(iter(self._kept.values())).at < granted.at - _GRANT_LIFE):
                dropped.append(self._kept.popitem(last=False)[1])
        for never in dropped:
            _complete(never, _pf.FlightCancelledError("the data-plane call never came"))

    def take(self, grant: str | None) -> _Granted | None:
        with self._lock:
            return None if grant is None else self._kept.pop(grant, None)


class _PlaneCallContext:
    """A data-plane call's context, with pyarrow's ServerCallContext methods. The call was
    granted by an action that passed the server's auth and middleware (shown to them as this
    call's method): its middleware instances, peer and identity carry over."""

    def __init__(self, granted: _Granted | None, call: Any) -> None:
        self._granted, self._call = granted, call

    def peer_identity(self) -> bytes:
        return b"" if self._granted is None else self._granted.identity

    def peer(self) -> str:
        return "" if self._granted is None else self._granted.peer

    def is_cancelled(self) -> bool:
        """Whether the client gave up on the call (or its connection failed)."""
        return self._call is not None and bool(self._call.cancelled())

    def get_middleware(self, key: str) -> Any:
        found = None if self._granted is None else self._granted.middleware.get(key)
        return found.inner if isinstance(found, _Deferred) else found


def _complete(granted: _Granted | None, exception: BaseException | None) -> None:
    """Ends, for the service's middleware, the call a grant made."""
    for instance in [] if granted is None else granted.middleware.values():
        if isinstance(instance, _Deferred):
            instance.complete(exception)


@contextmanager
def _completing(context: _PlaneCallContext) -> Iterator[None]:
    """Runs a plane call's handler; the service's middleware then hear how it ended."""
    try:
        yield
    except BaseException as e:
        _complete(context._granted, e)
        raise
    _complete(context._granted, None)


class _ServerReader(_Reading):
    def __init__(self, native: Any) -> None:
        self._native = native


class _MetadataWriter:
    """pyarrow's FlightMetadataWriter: a PutResult for the client, sent once the handler asks
    for the next message (or returns), so that a client waiting for each has it."""

    def __init__(self, native: Any) -> None:
        self._native = native

    def write(self, message: bytes | pa.Buffer) -> None:
        self._native.write(_app_metadata(message))


class _ExchangeWriter:
    """pyarrow's MetadataRecordBatchWriter for a server's side of an exchange."""

    def __init__(self, native: Any) -> None:
        self._native = native

    def begin(self, schema: pa.Schema, options: pa.ipc.IpcWriteOptions | None = None) -> None:
        self._native.begin(schema, _ipc_options(options))

    def write_batch(self, batch: Any) -> None:
        # No custom_metadata, as pyarrow's Flight writers take none.
        self._native.write_batch(batch)

    def write_with_metadata(self, batch: Any, buf: bytes | pa.Buffer) -> None:
        self._native.write_batch(batch, _app_metadata(buf))

    def write_metadata(self, buf: bytes | pa.Buffer) -> None:
        self._native.write_metadata(_app_metadata(buf))

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
    """What the native data planes call: protobuf bytes in, the user's methods between. It
    holds the server weakly, so that a server nobody keeps is collected."""

    def __init__(self, server: FlightServerBase) -> None:
        self._server = weakref.ref(server)

    def server(self) -> FlightServerBase:
        server = self._server()
        if server is None:
            raise _pf.FlightUnavailableError("the server is gone")
        return server

    def context(self, call: Any) -> _PlaneCallContext:
        """The context of a plane call (a native CallState: its grant, whether it was cancelled)."""
        return _PlaneCallContext(self.server()._grants.take(None if call is None else call.grant), call)

    def do_get(self, ticket: bytes, call: Any) -> Any:
        context = self.context(call)
        with _completing(context):
            return _output(self.server().do_get(context, _pf.Ticket(ticket)))

    def do_put(self, descriptor: bytes, reader: Any, writer: Any, call: Any) -> None:
        d, context = _pf.FlightDescriptor.deserialize(descriptor), self.context(call)
        with _completing(context):
            self.server().do_put(context, d, _ServerReader(reader), _MetadataWriter(writer))

    def do_exchange(self, descriptor: bytes, reader: Any, writer: Any, call: Any) -> None:
        d, context = _pf.FlightDescriptor.deserialize(descriptor), self.context(call)
        with _completing(context):
            self.server().do_exchange(context, d, _ServerReader(reader), _ExchangeWriter(writer))


def _header(headers: dict[str, list[Any]], name: str) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else v for v in headers.get(name, [])]


class _HelloAnswer(_pf.ServerMiddlewareFactory):
    """Answers a client's hello that proves the key with the planes' names, and marks the call
    with what it is for, so that the data-plane actions are answered for it."""

    planes: Any = None

    def _answer(self, headers: dict[str, list[Any]]) -> str | None:
        if self.planes is None:
            return None
        return next(filter(None, map(self.planes.answer, _header(headers, HELLO_HEADER))), None)

    def internal(self, info: _pf.CallInfo, headers: dict[str, list[Any]]) -> str | None:
        """What of ours a call from a client that proved the key is: "hello" (its ListActions
        asking about planes), the data method whose locations its DoAction asks for, or None
        (a call of the service's own)."""
        said = _header(headers, CALL_HEADER)
        if not said or self._answer(headers) is None:
            return None
        if said[0] == "hello" and info.method == _pf.FlightMethod.LIST_ACTIONS:
            return "hello"
        if said[0] in DATA_METHODS and info.method == _pf.FlightMethod.DO_ACTION:
            return said[0]
        return None

    def start_call(self, info: _pf.CallInfo, headers: dict[str, list[Any]]) -> _pf.ServerMiddleware | None:
        answer = self._answer(headers)
        return None if answer is None else _Answered(answer, self.internal(info, headers))


class _Answered(_pf.ServerMiddleware):
    def __init__(self, answer: str, internal: str | None) -> None:
        self.answer, self.internal = answer, internal

    def sending_headers(self) -> dict[str, str]:
        return {PLANES_HEADER: self.answer}


class _ShownAsMeant(_pf.ServerMiddlewareFactory):
    """A service's middleware factory, shown a keyed client's calls as pyarrow's client would
    have made them: its ListActions asking about planes not at all, the DoAction asking for a
    data call's locations as that call (whose context then holds what the factory made)."""

    def __init__(self, inner: _pf.ServerMiddlewareFactory, hello: _HelloAnswer) -> None:
        self.inner, self.hello = inner, hello

    def start_call(self, info: _pf.CallInfo, headers: dict[str, list[Any]]) -> _pf.ServerMiddleware | None:
        internal = self.hello.internal(info, headers)
        if internal == "hello":
            return None
        if internal is None:
            return self.inner.start_call(info, headers)
        made = self.inner.start_call(_pf.CallInfo(DATA_METHODS[internal]), headers)
        return None if made is None else _Deferred(made)


class _Deferred(_pf.ServerMiddleware):
    """A service middleware's instance for a data call that runs on a plane: the call
    completes for it when the plane call's handler ends, not when the action granting it
    did (unless that failed, and with it the call)."""

    def __init__(self, inner: _pf.ServerMiddleware) -> None:
        self.inner, self.completed = inner, False

    def sending_headers(self) -> Any:
        return self.inner.sending_headers()

    def call_completed(self, exception: BaseException | None) -> None:
        if exception is not None:
            self.complete(exception)

    def complete(self, exception: BaseException | None) -> None:
        """Completes the call for the service's middleware, once."""
        if not self.completed:
            self.completed = True
            self.inner.call_completed(exception)


def _internal(context: Any) -> str | None:
    """What of ours a call is (see _HelloAnswer.internal)."""
    marked = context.get_middleware(_MIDDLEWARE)
    return None if marked is None else marked.internal


def _parts(location: Any, tls: bool = False) -> tuple[str, str]:
    """The scheme and host (as a URL writes it) of a gRPC location, or of pyarrow's defaults."""
    if location is None or isinstance(location, tuple):
        return "grpc+tls" if tls else "grpc", "localhost" if location is None else str(location[0])
    scheme, _, rest = _uri(location).rpartition("://")
    return scheme, rest.rsplit(":", 1)[0]


def _peer_ip(peer: str) -> str | None:
    """The IP address in a gRPC peer string ("ipv4:10.0.0.3:5000", "ipv6:%5B::1%5D:5000"); None
    for a Unix socket's peer, which is on this host."""
    kind, _, rest = urllib.parse.unquote(peer).partition(":")
    if kind in ("ipv4", "ipv6"):
        return rest.rsplit(":", 1)[0].strip("[]")
    return None


def _address(location: Any) -> str:
    """The IP address a gRPC location names (unresolved if it cannot be): where a server's
    data planes listen too, and where a client reaches a plane on every address."""
    scheme, host = _parts(location)
    if scheme == "grpc+unix":
        return "127.0.0.1"
    host = host.strip("[]")
    try:
        return str(socket.getaddrinfo(host or "0.0.0.0", None)[0][4][0])
    except OSError:
        return host


class FlightServerBase(_pf.FlightServerBase):
    """pyarrow.flight.FlightServerBase, with `key` (else WIRESPEED_KEY) for data planes beside
    its gRPC: `planes` (default shm, ucx where built, tcp; with TLS, shm and tcp, its calls
    sealed with AES-256-GCM, as ucx and ofi carry data between hosts unencrypted). DoGet, DoPut
    and DoExchange of a client holding the key then run on a plane, calling the same methods;
    everything else is pyarrow's."""

    def __init__(self, location: Any = None, auth_handler: Any = None, tls_certificates: Any = None,
                 verify_client: Any = None, root_certificates: Any = None, middleware: Any = None, *,
                 key: Key = None, planes: list[str] | None = None) -> None:
        secret = _key_or_env(key)
        self._planes: Any = None
        self._plane_host = ""
        self._given = (location, bool(tls_certificates))
        middleware = dict(middleware or {})
        self._grants = _Grants()
        self._middleware_keys = list(middleware)
        hello = None
        if secret is not None and planes != []:
            hello = _HelloAnswer()
            # pyarrow's tracing factory is C++, and sees the calls as they are.
            middleware = {k: f if isinstance(f, _pf.TracingServerMiddlewareFactory) else _ShownAsMeant(f, hello)
                          for k, f in middleware.items()}
            middleware[_MIDDLEWARE] = hello
        # pyarrow's first: it checks the location and the TLS files, and says what is wrong.
        # Last: a call another factory refuses is never counted as open.
        self._gate = middleware[GATE] = Gate()
        super().__init__(location, auth_handler, tls_certificates, verify_client, root_certificates, middleware)
        if hello is not None:
            try:
                self._plane_host = _address(location)
                self._planes = hello.planes = _native.PlaneServer(_Dispatcher(self), self._plane_host, secret, planes,
                                                                  seal_tcp=bool(tls_certificates))
            except BaseException:
                super().shutdown()
                raise

    # pyarrow's defaults declare pyarrow's reader and writer types, which a data-plane call's
    # are not; these raise as pyarrow's would for a method not implemented.
    def do_put(self, context: Any, descriptor: Any, reader: Any, writer: Any) -> None:
        raise NotImplementedError

    def do_exchange(self, context: Any, descriptor: Any, reader: Any, writer: Any) -> None:
        raise NotImplementedError

    @property
    def location(self) -> str:
        """Where clients reach this server: `grpc://host:port` or `grpc+tls://` (127.0.0.1
        for a server on every address)."""
        scheme, host = _parts(*self._given)
        host = "127.0.0.1" if host in ("0.0.0.0", "[::]", "") else host
        return f"{scheme}://{host}:{self.port}"

    @property
    def planes(self) -> list[tuple[str, str]]:
        """The data planes served, as (name, listener URL)."""
        return [] if self._planes is None else self._planes.planes

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # A service's own do_action and list_actions answer every call but ours.
        super().__init_subclass__(**kwargs)
        own_action = cls.__dict__.get("do_action")
        if own_action is not None:
            @functools.wraps(own_action)
            def do_action(self: FlightServerBase, context: Any, action: Any) -> Any:
                answer = self._our_action(context, action)
                return own_action(self, context, action) if answer is None else answer

            cls.do_action = do_action  # type: ignore[method-assign]
        own_list = cls.__dict__.get("list_actions")
        if own_list is not None:
            @functools.wraps(own_list)
            def list_actions(self: FlightServerBase, context: Any) -> Any:
                return [] if _internal(context) == "hello" else own_list(self, context)

            cls.list_actions = list_actions  # type: ignore[method-assign]

    def _plane_action(self, context: Any, action: Any) -> list[_pf.Result] | None:
        """The locations a keyed client asks for, or None for an action of the service's own.
        An action shown to the middleware as a data call is answered only as one."""
        marked = context.get_middleware(_MIDDLEWARE)
        method = _PLANE_ACTIONS.get(action.type)
        if marked is None or self._planes is None:
            return None
        if marked.internal is not None and method != marked.internal:
            raise _pf.FlightUnauthorizedError(f"a call for {marked.internal} locations asked for {action.type!r}")
        if method is None:
            return None
        grant, uris = self._planes.locations(method, action.body.to_pybytes(), self._plane_host,
                                             _peer_ip(context.peer()))
        self._grants.keep(grant, context, self._middleware_keys)
        return [_pf.Result(pa.py_buffer(uri.encode())) for uri in uris]

    def _our_action(self, context: Any, action: Any) -> list[_pf.Result] | None:
        """The answer to a data-plane action, or to one of Flight's newer actions that a hook
        of this class takes; None for an action its do_action answers."""
        answer = self._plane_action(context, action)
        if answer is not None:
            return answer
        hook = _HOOKS.get(action.type)
        if hook is None or getattr(type(self), hook) is getattr(FlightServerBase, hook):
            return None
        message = _native.action_request(action.type, action.body.to_pybytes())
        if action.type == "CancelFlightInfo":
            result = self.cancel_flight_info(context, CancelFlightInfoRequest(_pf.FlightInfo.deserialize(message)))
            status = result.status if isinstance(result, CancelFlightInfoResult) else result
            body = _native.cancel_result(int(status))
        else:
            request = RenewFlightEndpointRequest(_pf.FlightEndpoint.deserialize(message))
            body = self.renew_flight_endpoint(context, request).serialize()
        return [_pf.Result(pa.py_buffer(body))]

    def cancel_flight_info(self, context: Any, request: CancelFlightInfoRequest) -> CancelFlightInfoResult:
        """The CancelFlightInfo action, as Arrow C++'s server names it: override to stop the
        query behind `request.info`. Not overridden, the action goes to do_action."""
        raise NotImplementedError

    def renew_flight_endpoint(self, context: Any, request: RenewFlightEndpointRequest) -> _pf.FlightEndpoint:
        """The RenewFlightEndpoint action: override to give `request.endpoint` a later
        expiration_time. Not overridden, the action goes to do_action."""
        raise NotImplementedError

    def do_action(self, context: Any, action: Any) -> Any:
        answer = self._our_action(context, action)
        return super().do_action(context, action) if answer is None else answer

    def list_actions(self, context: Any) -> Any:
        return [] if _internal(context) == "hello" else super().list_actions(context)

    def _stop_planes(self) -> None:
        if self._planes is not None:
            self._planes.shutdown()

    def shutdown(self, deadline: float | None = None) -> None:
        """pyarrow's shutdown, which waits for the calls open; or with `deadline` (seconds),
        a drain first: new calls are refused (UNAVAILABLE) on gRPC and every plane, plane
        calls open may finish within `deadline` and are then cancelled. gRPC calls open are
        waited for, however long: pyarrow gives gRPC's shutdown no deadline."""
        if deadline is not None:
            self._gate.drain(deadline, self._planes)
            self._stop_planes()
        super().shutdown()
        self._stop_planes()

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        self._stop_planes()


# Flight's newer actions, by the hook that answers each.
_HOOKS = {"CancelFlightInfo": "cancel_flight_info", "RenewFlightEndpoint": "renew_flight_endpoint"}


class DirectoryServer:
    """`wirespeed serve` running in this process; see `serve`."""

    def __init__(self, native: Any, host: str, scheme: str) -> None:
        self._native, self._host, self._scheme = native, host, scheme

    @property
    def port(self) -> int:
        return int(self._native.port)

    @property
    def location(self) -> str:
        """`grpc://host:port` (or `grpc+tls://`, or `grpc+unix://PATH`) for clients; 127.0.0.1
        for every address."""
        if self._scheme == "grpc+unix":
            return f"grpc+unix://{self._host}"
        host = "127.0.0.1" if self._host in ("0.0.0.0", "") else self._host
        return f"{self._scheme}://{host}:{self.port}"

    @property
    def planes(self) -> list[tuple[str, str]]:
        """The data planes served, as (name, listener URL)."""
        return list(self._native.planes)

    def serve(self) -> None:
        """Blocks until `shutdown` (from another thread) or Ctrl-C."""
        self._native.wait()

    def wait(self) -> None:
        self.serve()

    def shutdown(self, deadline: float | None = None) -> int:
        """Stops at once, or with `deadline` (seconds) drains as `serve` does on SIGTERM: gRPC
        health turns NOT_SERVING, new calls are refused (UNAVAILABLE) on every plane, and the
        calls open may finish within `deadline` (inf: however long they take) before they are
        cancelled (an upload cut short leaves nothing). Returns how many were cancelled."""
        return self._native.shutdown(deadline)

    def __enter__(self) -> DirectoryServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def serve(directory: str | os.PathLike[str], location: Any = None, key: Key = None, *,
          planes: list[str] | None = None, password: str | None = None, password_over_plaintext: bool = False,
          tls_certificates: list[tuple[bytes, bytes]] | None = None, root_certificates: bytes | None = None,
          cache_mb: int = 0, handler_threads: int | None = None, advertise: str | None = None,
          compression: str | None = None, ticket_ttl: float | None = None) -> DirectoryServer:
    """Serves the Arrow IPC and Parquet files under `directory` as flights (keyed by relative
    path), as `wirespeed serve` does: uploads land whole or not at all, `cache_mb` keeps
    decoded tables in memory. `tls_certificates` ([(cert PEM, key PEM)]) serves grpc+tls,
    `root_certificates` then asks clients for certificates from that CA (mutual TLS); a
    `password` needs TLS unless `password_over_plaintext`. Endpoints name the server as each
    client reached it, or `advertise` (a URI, for a server behind NAT or a proxy). Batches go
    uncompressed unless `compression` is "lz4" or "zstd". With `ticket_ttl` (seconds), tickets
    expire that long after GetFlightInfo gives them (RenewFlightEndpoint extends one); without
    it a ticket is the flight's name. Returns the running server."""
    uri = _uri(location or "grpc://127.0.0.1:0")
    scheme, listen = uri.split("://", 1) if "://" in uri else ("grpc", uri)
    if scheme not in ("grpc", "grpc+tcp", "grpc+tls", "grpc+unix"):
        raise UsageError(f"{scheme}://: serve listens on grpc://host:port, grpc+tls://host:port or grpc+unix://PATH")
    tls = None
    if tls_certificates:
        (cert, private_key), = tls_certificates
        tls = (bytes(cert), bytes(private_key), None if root_certificates is None else bytes(root_certificates))
    unix = scheme == "grpc+unix"
    # The server takes a Unix socket as its location (and refuses TLS there), a TCP one as host:port.
    native = _native.serve_directory(os.fspath(directory), uri if unix else listen, _key(key), planes, password,
                                     password_over_plaintext, tls, handler_threads, cache_mb, advertise,
                                     compression, ticket_ttl)
    if unix:
        return DirectoryServer(native, listen, scheme)
    return DirectoryServer(native, listen.rsplit(":", 1)[0], "grpc+tls" if tls else "grpc")
