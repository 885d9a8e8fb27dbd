"""Timeslice building (FLESnet's many-to-many pattern) from Python.

`build` runs a whole builder in this process: `inputs` input nodes on threads feeding one
compute node, whose complete timeslices come out in order. `run_mpi` runs one node per rank of
a job that mpirun started (mpi4py). `ComputeNode` and `feed` are the two halves, for inputs
that run elsewhere.

Each `Timeslice` holds its components in the compute node's rings: `memoryview(component)`
reads one in place (FLESnet's layout: microslice descriptors, then contents), `verify()` checks
every microslice's CRC-32C, and `to_arrow()` gives a pyarrow RecordBatch with a row per
microslice. Ring space comes back once a timeslice and its views are dropped.

With `gpu=N` (or `gpu="host"`), each timeslice is built contiguously in a frame in that GPU's
memory (or the host's) as its components arrive, and every microslice's CRC-32C is checked
there before the `Frame` comes out. `cupy.from_dlpack(frame)`, `torch.from_dlpack(frame)` or
`numpy.from_dlpack(frame)` see it as a uint8 vector without a copy (`frame.parts` says where
each component lies), and the frame returns to the pool once it and every array over it are
gone.

`TimesliceReceiver(name)` attaches to a compute node that `wirespeed fles run --output
shm:NAME` runs, as FLESnet's `fles::TimesliceReceiver` does: iterating it takes each timeslice
(those its stride and offset select) where the node keeps it, in shared memory; taking the next
releases the one before to the node, so copy what you keep.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import threading
from collections.abc import Iterator
from typing import Any, Union

from . import Key, _key, _native
from ._errors import UsageError
from ._native import (
    Component, ComputeNode, Frame, FrameNode, RunSettings, TakenTimeslice, Timeslice, TimesliceReceiver,
)

__all__ = [
    "Build", "Component", "ComputeNode", "Frame", "FrameNode", "MpiNode", "RunSettings", "TakenTimeslice", "Timeslice",
    "TimesliceReceiver", "build", "feed", "run_mpi",
]

# Where frames are built: a GPU's number, "host", or None for timeslices left in the rings.
FrameTarget = Union[int, str, None]



def feed(settings: RunSettings, index: int, urls: list[str], key: Key = None) -> tuple[int, int]:
    """Runs input `index` (generated microslices) against the compute nodes at `urls` until the
    run's last timeslice is acknowledged; returns (components, bytes) sent."""
    return _native.feed(settings, index, urls, _key(key))


class Build:
    """A builder running in this process; iterate it for the complete timeslices."""

    def __init__(self, settings: RunSettings, transport: str, key: bytes, gpu: FrameTarget = None,
                 frames: int = 8, frame_bytes: int | None = None, gpu_rings: bool = False) -> None:
        # A name of its own: a finished node's may still be bound while its last connections close.
        name = f"wirespeed-fles-py-{os.getpid()}-{os.urandom(6).hex()}"
        listen = f"shm://@{name}" if transport == "shm" else f"{transport}://127.0.0.1:0"
        self.node: ComputeNode | FrameNode
        if gpu is None:
            self.node = ComputeNode(settings, listen, 0, key)
        else:
            if gpu != "host" and not isinstance(gpu, int):
                raise UsageError(f"gpu={gpu!r}: a GPU's number, or \"host\"")
            device = None if gpu == "host" else int(gpu)
            self.node = FrameNode(settings, listen, 0, key, device, frames, frame_bytes, gpu_rings)
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

    def __iter__(self) -> Iterator[Timeslice | Frame]:
        return iter(self.node)

    def finish(self) -> dict[str, float]:
        """Waits for the run to end and returns the compute node's summary; raises the first
        input's error, if one failed. The run ends once every timeslice (or frame) is released,
        so drop what you kept first, the loop variable and arrays over frames included."""
        summary = dict(self.node.finish())
        for t in self._threads:
            t.join()
        if self.errors:
            raise self.errors[0]
        return summary


def build(inputs: int, timeslices: int, *, scheduler: str = "dfs", transport: str = "shm", key: Key = None,
          gpu: FrameTarget = None, frames: int = 8, frame_bytes: int | None = None, gpu_rings: bool = False,
          **options: Any) -> Build:
    """Starts a builder in this process: `inputs` inputs on threads and one compute node, over
    `transport` (shm or tcp, or ucx, ofi+tcp, ...), for `timeslices` timeslices. `options` are
    `RunSettings`' (timeslice_size, overlap, microslice_size, rate, buffer_size, ...). A key is
    made up when none is given: everything runs here. With `gpu` (a GPU's number, or "host"),
    timeslices come out as `Frame`s: `frames` of them in flight, of `frame_bytes` each
    (default: the largest timeslice these settings make). With `gpu_rings` (and a GPU's number),
    the inputs put into rings in the GPU's memory where their transport can (shm, ucx), and
    frames are copied within the GPU; `Build.node.path` says which way the bytes went."""
    settings = RunSettings(inputs, 1, scheduler, timeslices, **options)
    secret = _key(key) or os.urandom(16).hex().encode()
    return Build(settings, transport, secret, gpu, frames, frame_bytes, gpu_rings)


class MpiNode:
    """This rank's node of a run under mpirun: iterate it for the timeslices (an input's
    iteration is empty), then `finish()`."""

    def __init__(self, settings: RunSettings, rank: int, comm: Any, transport: str, host: str, key: bytes) -> None:
        self.rank, self.role = rank, "input" if rank < settings.inputs else "compute"
        self.node: ComputeNode | None = None
        if self.role == "compute":
            index = rank - settings.inputs
            listen = f"shm://@wirespeed-fles-mpi-{os.getpid()}-{index}" if transport == "shm" else f"{transport}://{host}:0"
            self.node = ComputeNode(settings, listen, index, key)
        urls = [u for u in comm.allgather(self.node.url if self.node else None) if u is not None]
        self.sent: tuple[int, int] | None = None
        if self.node is None:
            self.sent = feed(settings, rank, urls, key)

    def __iter__(self) -> Iterator[Timeslice]:
        return iter(self.node) if self.node is not None else iter(())

    def finish(self) -> dict[str, float]:
        """A compute node's summary, or an input's components and bytes sent."""
        if self.node is not None:
            return dict(self.node.finish())
        components, sent_bytes = self.sent or (0, 0)
        return {"components": float(components), "bytes": float(sent_bytes)}


def _listen_host() -> str:
    """WIRESPEED_FLES_HOST, else this host name's first IPv4 address that is not loopback."""
    if "WIRESPEED_FLES_HOST" in os.environ:
        return os.environ["WIRESPEED_FLES_HOST"]
    try:
        addresses = socket.getaddrinfo(socket.gethostname(), 0, socket.AF_INET)
    except OSError:
        return "127.0.0.1"
    usable = [str(a[4][0]) for a in addresses if not str(a[4][0]).startswith("127.")]
    return usable[0] if usable else "127.0.0.1"


def run_mpi(inputs: int, timeslices: int, *, scheduler: str = "dfs", transport: str = "tcp", key: Key = None,
            comm: Any = None, host: str | None = None, **options: Any) -> MpiNode:
    """Runs this rank's node of a builder that mpirun started, as `wirespeed fles run --inputs`
    does: ranks below `inputs` are inputs (run to the end here), the rest compute nodes (whose
    timeslices the returned node hands out). Every rank needs the same key (`key=` or
    WIRESPEED_KEY); rank 0 broadcasts a nonce from which all derive the run's own key, so the
    key itself never travels. `comm` defaults to mpi4py's COMM_WORLD."""
    if comm is None:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
    base = _key(key) or os.environ.get("WIRESPEED_KEY", "").encode()
    if not base:
        raise UsageError("every rank needs the same key: pass key= or set WIRESPEED_KEY")
    computes = comm.Get_size() - inputs
    settings = RunSettings(inputs, computes, scheduler, timeslices, **options)
    nonce = comm.bcast(os.urandom(32).hex() if comm.Get_rank() == 0 else None, root=0)
    run_key = hmac.new(base, b"wirespeed fles run " + nonce.encode(), hashlib.sha256).hexdigest().encode()
    return MpiNode(settings, comm.Get_rank(), comm, transport, host or _listen_host(), run_key)
