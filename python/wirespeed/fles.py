"""Timeslice building (FLESnet's many-to-many pattern) from Python.

`build` runs a whole builder in this process: `inputs` input nodes on threads feeding one
compute node, whose complete timeslices come out in order. `ComputeNode` and `feed` are the two
halves, for inputs that run elsewhere (other processes or hosts, `wirespeed fles node`).

Each `Timeslice` holds its components in the compute node's rings: `memoryview(component)`
reads one in place (FLESnet's layout: microslice descriptors, then contents), `verify()` checks
every microslice's CRC-32C, and `to_arrow()` gives a pyarrow RecordBatch with a row per
microslice. Ring space comes back once a timeslice and its views are dropped.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any, Union

from . import _native
from ._native import Component, ComputeNode, RunSettings, Timeslice

__all__ = ["Build", "Component", "ComputeNode", "RunSettings", "Timeslice", "build", "feed"]

Key = Union[str, bytes, None]


def _key(key: Key) -> bytes | None:
    return key.encode() if isinstance(key, str) else key


def feed(settings: RunSettings, index: int, urls: list[str], key: Key = None) -> tuple[int, int]:
    """Runs input `index` (generated microslices) against the compute nodes at `urls` until the
    run's last timeslice is acknowledged; returns (components, bytes) sent."""
    return _native.feed(settings, index, urls, _key(key))


class Build:
    """A builder running in this process; iterate it for the complete timeslices."""

    def __init__(self, settings: RunSettings, transport: str, key: bytes) -> None:
        listen = "shm://@wirespeed-fles-py-%d" % id(self) if transport == "shm" else f"{transport}://127.0.0.1:0"
        self.node = ComputeNode(settings, listen, 0, key)
        self.errors: list[BaseException] = []
        self._threads = [
            threading.Thread(target=self._feed, args=(settings, i, key), daemon=True, name=f"fles-input-{i}")
            for i in range(settings.inputs)
        ]
        for t in self._threads:
            t.start()

    def _feed(self, settings: RunSettings, index: int, key: bytes) -> None:
        try:
            _native.feed(settings, index, [self.node.url], key)
        except BaseException as e:  # reported by finish()
            self.errors.append(e)

    def __iter__(self) -> Iterator[Timeslice]:
        return iter(self.node)

    def finish(self) -> dict[str, float]:
        """Waits for the run to end and returns the compute node's summary; raises the first
        input's error, if one failed. The run ends once every timeslice is released, so drop
        what you kept first, the loop variable included (`del ts`)."""
        summary = dict(self.node.finish())
        for t in self._threads:
            t.join()
        if self.errors:
            raise self.errors[0]
        return summary


def build(inputs: int, timeslices: int, *, scheduler: str = "dfs", transport: str = "shm", key: Key = None,
          **options: Any) -> Build:
    """Starts a builder in this process: `inputs` inputs on threads and one compute node, over
    `transport` (shm or tcp, or ucx, ofi+tcp, ...), for `timeslices` timeslices. `options` are
    `RunSettings`' (timeslice_size, overlap, microslice_size, rate, buffer_size, ...). A key is
    made up when none is given: everything runs here."""
    settings = RunSettings(inputs, 1, scheduler, timeslices, **options)
    secret = _key(key) or os.urandom(16).hex().encode()
    return Build(settings, transport, secret)
