"""Draining a FlightServerBase: while it drains, new calls are refused (UNAVAILABLE) on gRPC
and on every plane, and the plane calls open may finish until the deadline.

The gate holds no instance per call: pyarrow's ServerCallContext.get_middleware finds a
C++ middleware (its tracing one) only while no Python middleware has an instance on the call."""

from __future__ import annotations

import time
from typing import Any

import pyarrow.flight as _pf

GATE = "wirespeed.gate"


class Gate(_pf.ServerMiddlewareFactory):
    """Refuses new calls once the server drains."""

    draining = False

    def start_call(self, info: _pf.CallInfo, headers: dict[str, list[Any]]) -> None:
        if self.draining:
            raise _pf.FlightUnavailableError("the server is shutting down: try another, or again later")

    def drain(self, deadline: float, planes: Any) -> None:
        """Refuses new calls from now, on gRPC and on `planes` (a native PlaneServer, or None),
        and waits up to `deadline` seconds for the plane calls open to finish."""
        until = time.monotonic() + deadline
        self.draining = True
        while planes is not None and planes.drain() > 0 and time.monotonic() < until:
            time.sleep(0.02)
