"""The Flight RPCs and actions since Arrow 13 that pyarrow 26's client lacks, named as Arrow
C++'s FlightClient names them: poll_flight_info, cancel_flight_info, renew_flight_endpoint and
the session options. They travel on a gRPC connection of their own (the Rust client's, as
pyarrow's cannot make PollFlightInfo), which keeps the session's cookie; a call's
`authorization` header (from authenticate_basic_token) goes with it.
"""

from __future__ import annotations

import enum
import threading
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.flight as _pf

from . import _native


class CancelStatus(enum.IntEnum):
    """What CancelFlightInfo did (Flight's CancelStatus)."""
    UNSPECIFIED = 0
    CANCELLED = 1
    CANCELLING = 2
    NOT_CANCELLABLE = 3


class CancelFlightInfoRequest(NamedTuple):
    """Asks the server to stop the query behind `info`."""
    info: _pf.FlightInfo


class CancelFlightInfoResult(NamedTuple):
    status: CancelStatus


class RenewFlightEndpointRequest(NamedTuple):
    """Asks the server for `endpoint` with a later expiration_time."""
    endpoint: _pf.FlightEndpoint


class PollInfo(NamedTuple):
    """How far a query has come: its FlightInfo so far (None: nothing yet), the descriptor to
    poll next (None: it is done), progress from 0 to 1 (None: unknown), and when the query
    may be forgotten (a UTC timestamp scalar, or None)."""
    info: _pf.FlightInfo | None
    flight_descriptor: _pf.FlightDescriptor | None
    progress: float | None
    expiration_time: pa.TimestampScalar | None


def _authorization(options: _pf.FlightCallOptions | None) -> str | None:
    for name, value in (options.headers if options is not None else None) or []:
        name = name.decode() if isinstance(name, bytes) else name
        if name.lower() == "authorization":
            return value.decode() if isinstance(value, bytes) else value
    return None


class NewerCalls:
    """FlightClient's share of Flight's newer calls; `_calls_to` says where and how to connect."""

    _calls_to: tuple[str, dict[str, Any]]
    _calls_lock = threading.Lock()

    def _calls(self) -> Any:
        with self._calls_lock:
            native = self.__dict__.get("_native_calls")
            if native is None:
                url, tls = self._calls_to
                native = self.__dict__["_native_calls"] = _native.FlightCalls(url, **tls)
            return native

    def close(self) -> None:
        with self._calls_lock:
            self.__dict__.pop("_native_calls", None)
        super().close()  # type: ignore[misc]

    def poll_flight_info(self, descriptor: _pf.FlightDescriptor,
                         options: _pf.FlightCallOptions | None = None) -> PollInfo:
        """PollFlightInfo: starts (or asks after) the query `descriptor` names."""
        info, next_descriptor, progress, expiration = self._calls().poll_flight_info(
            descriptor.serialize(), _authorization(options))
        return PollInfo(
            None if info is None else _pf.FlightInfo.deserialize(info),
            None if next_descriptor is None else _pf.FlightDescriptor.deserialize(next_descriptor),
            progress,
            None if expiration is None else pa.scalar(expiration, pa.timestamp("ns", "UTC")))

    def cancel_flight_info(self, request: CancelFlightInfoRequest | _pf.FlightInfo,
                           options: _pf.FlightCallOptions | None = None) -> CancelFlightInfoResult:
        """The CancelFlightInfo action: asks the server to stop the query behind a FlightInfo."""
        info = request.info if isinstance(request, CancelFlightInfoRequest) else request
        status = self._calls().cancel_flight_info(info.serialize(), _authorization(options))
        known = status in CancelStatus._value2member_map_
        return CancelFlightInfoResult(CancelStatus(status) if known else CancelStatus.UNSPECIFIED)

    def renew_flight_endpoint(self, request: RenewFlightEndpointRequest | _pf.FlightEndpoint,
                              options: _pf.FlightCallOptions | None = None) -> _pf.FlightEndpoint:
        """The RenewFlightEndpoint action: the endpoint with a later expiration_time."""
        endpoint = request.endpoint if isinstance(request, RenewFlightEndpointRequest) else request
        renewed = self._calls().renew_flight_endpoint(endpoint.serialize(), _authorization(options))
        return _pf.FlightEndpoint.deserialize(renewed)

    def set_session_options(self, options_to_set: dict[str, Any],
                            options: _pf.FlightCallOptions | None = None) -> dict[str, str]:
        """SetSessionOptions: sets each option (str, bool, int, float, list of str; None
        unsets it) for this client's session, which the server starts on the first call.
        Returns the options refused, each as "invalid_name", "invalid_value" or "error"."""
        return self._calls().set_session_options(dict(options_to_set), _authorization(options))

    def get_session_options(self, options: _pf.FlightCallOptions | None = None) -> dict[str, Any]:
        """GetSessionOptions: this client's session's options."""
        return self._calls().get_session_options(_authorization(options))

    def close_session(self, options: _pf.FlightCallOptions | None = None) -> None:
        """CloseSession: ends this client's session; later calls start a new one."""
        self._calls().close_session(_authorization(options))

