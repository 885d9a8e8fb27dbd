"""pyarrow's errors from a call over gRPC, raised as wirespeed.flight's classes (pyarrow's,
subclassed, and wirespeed's), so that `except wirespeed.ConnectionFailedError` catches a failure
over gRPC as it does one on a data plane, and `except pyarrow.flight.FlightUnavailableError`
still catches both."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.flight as _pf

from . import _flight_base as _ours

# By exact class: pyarrow raises these for a call's status; its subclasses (a write over the
# size limit, which carries the sizes) stay as they are.
_TRANSLATED: dict[type, type] = {
    _pf.FlightUnauthenticatedError: _ours.FlightUnauthenticatedError,
    _pf.FlightUnauthorizedError: _ours.FlightUnauthorizedError,
    _pf.FlightUnavailableError: _ours.FlightUnavailableError,
    _pf.FlightTimedOutError: _ours.FlightTimedOutError,
    _pf.FlightCancelledError: _ours.FlightCancelledError,
    _pf.FlightInternalError: _ours.FlightInternalError,
    _pf.FlightServerError: _ours.FlightServerError,
    pa.ArrowKeyError: _ours.FlightNotFoundError,
    pa.ArrowNotImplementedError: _ours.FlightNotImplementedError,
    pa.ArrowInvalid: _ours.FlightInvalidArgumentError,
}

# What a gRPC call hands back that raises as it is used.
_STREAMS = (_pf.FlightStreamReader, _pf.FlightStreamWriter, _pf.FlightMetadataReader,
            _pf.MetadataRecordBatchReader, _pf.MetadataRecordBatchWriter)


def _translated(e: BaseException) -> BaseException:
    ours = _TRANSLATED.get(type(e))
    if ours is None:
        return e
    if issubclass(ours, _pf.FlightError):
        return ours(str(e), getattr(e, "extra_info", None) or b"")
    return ours(str(e))


def _calling(call: Callable[..., Any]) -> Callable[..., Any]:
    """`call`, raising ours for pyarrow's, its streams wrapped alike."""
    @functools.wraps(call)
    def translating(*args: Any, **kwargs: Any) -> Any:
        try:
            result = call(*args, **kwargs)
        except Exception as e:
            ours = _translated(e)
            if ours is e:
                raise
            raise ours.with_traceback(e.__traceback__) from None
        return _wrapped(result)
    return translating


def _iterating(it: Iterator[Any]) -> Iterator[Any]:
    next_item = _calling(lambda: next(it))
    while True:
        try:
            item = next_item()
        except StopIteration:
            return
        yield item


def _wrapped(result: Any) -> Any:
    if isinstance(result, _STREAMS):
        return _Translating(result)
    if type(result) is tuple:  # a pair of streams (a NamedTuple is a result of its own)
        return tuple(_wrapped(r) for r in result)
    # The generators of list_flights and do_action (Cython's generator type too), not the
    # readers that merely iterate (a RecordBatchReader stays what it is).
    if isinstance(result, Iterator) and type(result).__name__ == "generator":
        return _iterating(result)
    return result


class _Translating:
    """A pyarrow reader or writer of a gRPC call, whose errors are wirespeed.flight's."""

    def __init__(self, inner: Any) -> None:
        object.__setattr__(self, "_inner", inner)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        return _calling(value) if callable(value) else value

    def __iter__(self) -> Iterator[Any]:
        return _iterating(iter(self._inner))

    def __enter__(self) -> _Translating:
        _calling(self._inner.__enter__)()
        return self

    def __exit__(self, *exc: object) -> Any:
        return _calling(self._inner.__exit__)(*exc)

    def __repr__(self) -> str:
        return repr(self._inner)


# The calls of pyarrow's FlightClient that go over gRPC.
GRPC_CALLS = ("authenticate", "authenticate_basic_token", "list_actions", "do_action", "list_flights",
              "get_flight_info", "poll_flight_info", "get_schema", "do_get", "do_put", "do_exchange")


def translating(cls: type) -> type:
    """`cls` (a FlightClient) with every gRPC call's errors wirespeed.flight's."""
    for name in GRPC_CALLS:
        if hasattr(cls, name):
            setattr(cls, name, _calling(getattr(cls, name)))
    return cls
