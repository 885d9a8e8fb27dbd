"""What wirespeed.flight's client and server share: the error classes, the status codes
Python exceptions travel as, and the reading half of a stream."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.flight as _pf
from pyarrow.flight import FlightDescriptor, Location

from ._errors import AuthenticationError, ConnectionError, Error, TimeoutError, UsageError



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


# Shown as wirespeed.flight.X in tracebacks, where users import them from.
for _class in (FlightError, FlightServerError, FlightInternalError, FlightUnavailableError, FlightTimedOutError,
               FlightCancelledError, FlightUnauthenticatedError, FlightUnauthorizedError, FlightNotFoundError,
               FlightInvalidArgumentError, FlightNotImplementedError, FlightAlreadyExistsError, FlightStreamChunk):
    _class.__module__ = "wirespeed.flight"
