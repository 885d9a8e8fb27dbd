"""What wirespeed.flight's client and server share: the error classes, the status codes
Python exceptions travel as, and the reading half of a stream."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.flight as _pf
from pyarrow.flight import FlightDescriptor, Location

from ._errors import (AuthenticationError, ConnectionFailedError, Error, LimitError, NotFoundError, TimedOutError,
                      UsageError)

# Errors: each is pyarrow.flight's class of the same name (or pyarrow's for the code), so
# `except pyarrow.flight.FlightUnavailableError` keeps working, and a wirespeed.Error.


class FlightError(Error, _pf.FlightError):
    """A Flight call failed; the subclass says how, by its gRPC status code."""

    def __init__(self, message: str = "", extra_info: bytes = b"") -> None:
        _pf.FlightError.__init__(self, message, extra_info)


class FlightServerError(FlightError, _pf.FlightServerError):
    pass


# Codes pyarrow raises as a server error, each also the class of its kind of failure.


class FlightResourceExhaustedError(FlightServerError, LimitError):
    """RESOURCE_EXHAUSTED: a limit of the server's (calls per client, memory for requests)."""

    exit_code = 1


class FlightFailedPreconditionError(FlightServerError, UsageError):
    """FAILED_PRECONDITION: a request the server cannot serve in its present state."""

    exit_code = 2


class FlightOutOfRangeError(FlightServerError, UsageError):
    """OUT_OF_RANGE: a request past the end of what there is."""

    exit_code = 2


class FlightAbortedError(FlightServerError, ConnectionFailedError):
    """ABORTED: the call was cut off, as by a conflict."""

    exit_code = 4


class FlightInternalError(FlightError, _pf.FlightInternalError):
    pass


class FlightUnavailableError(FlightError, ConnectionFailedError, _pf.FlightUnavailableError):
    exit_code = 4


class FlightTimedOutError(FlightError, TimedOutError, _pf.FlightTimedOutError):
    exit_code = 4


class FlightCancelledError(FlightError, ConnectionFailedError, _pf.FlightCancelledError):
    exit_code = 4


class FlightUnauthenticatedError(FlightError, AuthenticationError, _pf.FlightUnauthenticatedError):
    exit_code = 3


class FlightUnauthorizedError(FlightError, AuthenticationError, _pf.FlightUnauthorizedError):
    exit_code = 3


# pyarrow raises these three codes as Arrow's own errors, not as Flight errors: no
# `except FlightError` catches them, and they carry no extra_info.


class FlightNotFoundError(NotFoundError, pa.ArrowKeyError):
    """NOT_FOUND, which pyarrow raises as ArrowKeyError."""


class FlightInvalidArgumentError(UsageError, pa.ArrowInvalid):
    """INVALID_ARGUMENT, which pyarrow raises as ArrowInvalid."""


class FlightNotImplementedError(Error, pa.ArrowNotImplementedError):
    """UNIMPLEMENTED, which pyarrow raises as ArrowNotImplementedError."""


class FlightAlreadyExistsError(FlightError, pa.ArrowException):
    pass


# The status code a server handler's exception travels as, as pyarrow's server sends it: the
# Flight errors by their class, then the three Python errors Arrow has a code for; anything
# else is a server error (UNKNOWN), which the client raises as FlightServerError.
_STATUS = [
    ((_pf.FlightServerError,), "unknown"),
    ((_pf.FlightInternalError,), "internal"),
    ((_pf.FlightUnauthenticatedError,), "unauthenticated"),
    ((_pf.FlightUnauthorizedError,), "permission_denied"),
    ((_pf.FlightUnavailableError,), "unavailable"),
    ((_pf.FlightTimedOutError,), "deadline_exceeded"),
    ((_pf.FlightCancelledError,), "cancelled"),
    ((FlightAlreadyExistsError,), "already_exists"),
    ((KeyError,), "not_found"),
    ((NotImplementedError,), "unimplemented"),
    ((ValueError,), "invalid_argument"),
]


def _status_of(e: BaseException) -> tuple[str, str, bytes]:
    """The status code, message and extra_info a handler's exception travels as, as pyarrow's
    server words it: a Flight error's message as raised, any other's followed by what it was."""
    code = next((code for classes, code in _STATUS if isinstance(e, classes)), "unknown")
    if isinstance(e, _pf.FlightError):
        return code, str(e), bytes(getattr(e, "extra_info", None) or b"")
    return code, f"{e}. Detail: Python exception: {type(e).__name__}", b""


# Arrow IPC writes app_metadata's length as an int32.
_MAX_APP_METADATA = 2**31 - 1


def _app_metadata(buf: Any) -> bytes:
    """`buf` as the bytes of an app_metadata, refused as pyarrow refuses one over 2 GiB."""
    if memoryview(buf).nbytes > _MAX_APP_METADATA:
        raise pa.ArrowCapacityError("app_metadata size overflow")
    return bytes(buf)


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


def _ipc_options(options: pa.ipc.IpcWriteOptions | None) -> tuple[bool, str | None] | None:
    """What a data plane takes of pyarrow's IpcWriteOptions: dictionary deltas, compression."""
    return None if options is None else (bool(options.emit_dictionary_deltas), options.compression)


class _Reading:
    """What client and server readers share: pyarrow's MetadataRecordBatchReader methods. A
    client's reader may keep only some fields (IpcReadOptions.included_fields)."""

    _native: Any
    _fields: list[int] | None = None
    # A client's call on a plane: the program's middleware hear of its end (a _Completion).
    _completion: Any = None

    def _ended(self, exception: BaseException | None) -> None:
        if self._completion is not None:
            self._completion.done(exception)

    @property
    def schema(self) -> pa.Schema:
        schema = self._native.schema
        if self._fields is None:
            return schema
        return pa.schema([schema.field(i) for i in self._fields], metadata=schema.metadata)

    def _chunk(self, raw: tuple[Any, Any] | None) -> FlightStreamChunk:
        if raw is None:
            self._ended(None)
            raise StopIteration
        batch, meta = raw
        if batch is not None and self._fields is not None:
            batch = batch.select(self._fields)
        return FlightStreamChunk(batch, None if meta is None else pa.py_buffer(meta))

    @property
    def stats(self) -> pa.ipc.ReadStats:
        """How many IPC messages of each kind have been read."""
        return pa.ipc.ReadStats(*self._native.stats)

    def read_chunk(self) -> FlightStreamChunk:
        """The next message; raises StopIteration at the end, as pyarrow's does."""
        return self._chunk(self._read(self._native.read_chunk))

    def read_all(self) -> pa.Table:
        """The remaining batches as a Table (blocking; Ctrl-C interrupts it)."""
        table = self._read(self._native.read_all)
        self._ended(None)
        return table if self._fields is None else table.select(self._fields)

    def _read(self, read: Any) -> Any:
        try:
            return read()
        except BaseException as e:
            self._ended(e)
            raise

    def read_pandas(self, **options: Any) -> Any:
        return self.read_all().to_pandas(**options)

    def to_reader(self) -> pa.RecordBatchReader:
        """The remaining batches as a pyarrow RecordBatchReader, without a copy."""
        return pa.RecordBatchReader.from_stream(self)

    def __iter__(self) -> Iterator[FlightStreamChunk]:
        while (raw := self._read(self._native.read_chunk)) is not None:
            yield self._chunk(raw)
        self._ended(None)

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        """The Arrow PyCapsule interface: `pyarrow.table(reader)`, polars and duckdb take the
        remaining batches without a copy."""
        # A server's reader hands its batches on one by one (its handler runs on a thread of
        # its own, where a batch at a time costs nothing more).
        if self._fields is not None or not hasattr(self._native, "__arrow_c_stream__"):
            batches = (chunk.data for chunk in self if chunk.data is not None)
            return pa.RecordBatchReader.from_batches(self.schema, batches).__arrow_c_stream__(requested_schema)
        return self._native.__arrow_c_stream__(requested_schema)


# Shown as wirespeed.flight.X in tracebacks, where users import them from.
for _class in (FlightError, FlightServerError, FlightInternalError, FlightUnavailableError, FlightTimedOutError,
               FlightCancelledError, FlightUnauthenticatedError, FlightUnauthorizedError, FlightNotFoundError,
               FlightInvalidArgumentError, FlightNotImplementedError, FlightAlreadyExistsError, FlightResourceExhaustedError,
               FlightFailedPreconditionError, FlightOutOfRangeError, FlightAbortedError, FlightStreamChunk):
    _class.__module__ = "wirespeed.flight"
