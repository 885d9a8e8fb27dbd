"""The native module (Rust, PyO3); `wirespeed` and `wirespeed.flight` wrap it."""

from collections.abc import Callable
from os import PathLike
from typing import Any, final

import pyarrow as pa

__version__: str

HELLO_HEADER: str
CALL_HEADER: str
PLANES_HEADER: str
PLANE_ACTIONS: dict[str, str]

def _error_classes() -> list[tuple[str, int]]: ...
def _flight_classes() -> list[tuple[str, str]]: ...

__all__ = [
    "Body",
    "CALL_HEADER",
    "CallState",
    "Component",
    "ComputeNode",
    "Connection",
    "CopyOptions",
    "FlightCalls",
    "FlightReader",
    "FlightServer",
    "FlightWriter",
    "Frame",
    "FrameNode",
    "HELLO_HEADER",
    "Listener",
    "PLANES_HEADER",
    "PLANE_ACTIONS",
    "PendingReader",
    "PlaneClient",
    "PlaneServer",
    "PutResults",
    "Receiver",
    "RunSettings",
    "ServerReader",
    "ServerWriter",
    "Stream",
    "TakenTimeslice",
    "Timeslice",
    "TimesliceReceiver",
    "__version__",
    "_error_classes",
    "_flight_classes",
    "action_request",
    "cancel_result",
    "connect",
    "copy",
    "feed",
    "listen",
    "send_files",
    "serve_directory",
    "share_table",
]

_Progress = Callable[[int, int, int], object]
_Summary = list[tuple[str, int]]
_Chunk = tuple[pa.RecordBatch | None, bytes | None]
# (emit_dictionary_deltas, compression: "lz4", "zstd" or None)
_WriteOptions = tuple[bool, str | None]
# pyarrow ReadStats fields, in order
_Stats = tuple[int, int, int, int, int]

# Core

@final
class Listener:
    @property
    def url(self) -> str: ...
    def accept(self, timeout: float | None = None) -> Connection: ...

@final
class Connection:
    @property
    def peer(self) -> str: ...
    def open_stream(self) -> Stream: ...
    def accept_stream(self, timeout: float | None = None) -> Stream: ...
    def close(self) -> None: ...

@final
class Stream:
    @property
    def id(self) -> int: ...
    def send(self, body: Any, header: bytes | None = None) -> None: ...
    def recv(self) -> tuple[bytes, Body] | None: ...
    def finish(self) -> None: ...

@final
class Body:
    def __len__(self) -> int: ...
    def __bytes__(self) -> bytes: ...
    @property
    def address(self) -> int: ...

def listen(url: str, key: bytes | None = None, timeout: float | None = None) -> Listener: ...
def connect(url: str, key: bytes | None = None, timeout: float | None = None) -> Connection: ...

# Files

@final
class CopyOptions:
    def __new__(
        cls,
        recursive: bool = False,
        preserve: bool = False,
        resume: bool = False,
        sync: bool = False,
        no_clobber: bool = False,
        delete: bool = False,
        exclude: list[str] = ...,
        transport: str = "auto",
        streams: int | None = None,
        bwlimit_mb: float = 0.0,
        compress: int | None = None,
        encrypt: bool = False,
        direct: bool = False,
        dry_run: Callable[[str], object] | None = None,
    ) -> CopyOptions: ...

@final
class Receiver:
    def __new__(cls, listen: str, options: CopyOptions, key: bytes | None = None) -> Receiver: ...
    @property
    def port(self) -> int: ...
    def receive(self, dst: str | PathLike[str], timeout: float = 600.0, progress: _Progress | None = None) -> _Summary: ...

def copy(
    sources: list[str],
    dst: str,
    options: CopyOptions,
    ssh: str = "ssh",
    remote_bin: str = "wirespeed",
    ports: str | None = None,
    progress: _Progress | None = None,
) -> _Summary: ...
def send_files(
    to: str, paths: list[str], options: CopyOptions, key: bytes | None = None, progress: _Progress | None = None
) -> _Summary: ...

# Flight

@final
class PlaneClient:
    def __new__(cls, key: bytes | None, transport: str, reached: str) -> PlaneClient: ...
    def hello(self) -> str: ...
    def get(self, uris: list[str], ticket: bytes) -> FlightReader | None: ...
    def put(
        self, uris: list[str], descriptor: bytes, schema: Any, options: _WriteOptions | None = None
    ) -> FlightWriter | None: ...
    def exchange(self, uris: list[str], descriptor: bytes) -> tuple[FlightWriter, PendingReader] | None: ...

@final
class PendingReader:
    def open(self) -> FlightReader: ...

@final
class FlightReader:
    @property
    def schema(self) -> pa.Schema: ...
    @property
    def plane(self) -> str: ...
    @property
    def stats(self) -> _Stats: ...
    def started(self) -> None: ...
    def read_chunk(self) -> _Chunk | None: ...
    def read_all(self) -> pa.Table: ...
    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object: ...
    def cancel(self) -> None: ...

@final
class FlightWriter:
    @property
    def plane(self) -> str: ...
    def begin(self, schema: Any, options: _WriteOptions | None = None) -> None: ...
    def write_batch(self, batch: Any, app_metadata: bytes | None = None) -> None: ...
    def write_metadata(self, app_metadata: bytes) -> None: ...
    def write_stream(self, data: Any) -> None: ...
    def next_result(self) -> bytes | None: ...
    def finish(self) -> list[bytes]: ...

@final
class FlightServer:
    @property
    def port(self) -> int: ...
    @property
    def planes(self) -> list[tuple[str, str]]: ...
    def wait(self) -> None: ...
    def shutdown(self, deadline: float | None = None) -> int: ...

@final
class FlightCalls:
    def __new__(
        cls, url: str, roots: bytes | None = None, identity: tuple[bytes, bytes] | None = None,
        server_name: str | None = None, skip_verification: bool = False,
    ) -> FlightCalls: ...
    def poll_flight_info(
        self, descriptor: bytes, authorization: str | None
    ) -> tuple[bytes | None, bytes | None, float | None, int | None]: ...
    def cancel_flight_info(self, info: bytes, authorization: str | None) -> int: ...
    def renew_flight_endpoint(self, endpoint: bytes, authorization: str | None) -> bytes: ...
    def set_session_options(self, options: dict[str, Any], authorization: str | None) -> dict[str, str]: ...
    def get_session_options(self, authorization: str | None) -> dict[str, Any]: ...
    def close_session(self, authorization: str | None) -> None: ...

def action_request(kind: str, body: bytes) -> bytes: ...
def cancel_result(status: int) -> bytes: ...

@final
class PlaneServer:
    def __new__(
        cls, dispatcher: Any, host: str, key: bytes | None, planes: list[str] | None = None, seal_tcp: bool = False
    ) -> PlaneServer: ...
    @property
    def planes(self) -> list[tuple[str, str]]: ...
    def answer(self, hello: str) -> str | None: ...
    def locations(self, method: str, target: bytes, host: str, client: str | None = None) -> tuple[str, list[str]]: ...
    def drain(self) -> int: ...
    def shutdown(self) -> None: ...

@final
class CallState:
    @property
    def grant(self) -> str: ...
    def cancelled(self) -> bool: ...

@final
class PutResults:
    def write(self, message: bytes) -> None: ...

@final
class ServerReader:
    @property
    def schema(self) -> pa.Schema: ...
    @property
    def stats(self) -> _Stats: ...
    def read_chunk(self) -> _Chunk | None: ...
    def read_all(self) -> pa.Table: ...

@final
class ServerWriter:
    def begin(self, schema: Any, options: _WriteOptions | None = None) -> None: ...
    def write_batch(self, batch: Any, app_metadata: bytes | None = None) -> None: ...
    def write_metadata(self, app_metadata: bytes) -> None: ...
    def close(self) -> None: ...

def serve_directory(
    root: str,
    listen: str,
    key: bytes | None = None,
    planes: list[str] | None = None,
    password: str | None = None,
    password_over_plaintext: bool = False,
    tls: tuple[bytes, bytes, bytes | None] | None = None,
    handler_threads: int | None = None,
    cache_mb: int = 0,
    advertise: str | None = None,
    compression: str | None = None,
    ticket_ttl: float | None = None,
) -> FlightServer: ...

def share_table(data: Any) -> pa.Table: ...

# Timeslice building

@final
class RunSettings:
    def __new__(
        cls,
        inputs: int,
        computes: int = 1,
        scheduler: str = "dfs",
        timeslices: int | None = None,
        timeslice_size: int = 100,
        overlap: int = 1,
        microslice_size: int = 650,
        microslice_spread: int = 0,
        rate: float = 0.0,
        buffer_size: int = 33554432,
        descriptors: int = 4096,
        timeout: float = 30.0,
        interval_length: int = 10000,
        pattern: str = "wirespeed",
        timeslice_duration: int | None = None,
        overlap_before: int = 0,
        overlap_after: int = 0,
        microslice_duration: int = 100000,
        monitor: list[str] | None = None,
    ) -> RunSettings: ...
    @property
    def inputs(self) -> int: ...
    @property
    def computes(self) -> int: ...

@final
class ComputeNode:
    def __new__(cls, settings: RunSettings, listen: str, index: int = 0, key: bytes | None = None) -> ComputeNode: ...
    @property
    def url(self) -> str: ...
    def __iter__(self) -> ComputeNode: ...
    def __next__(self) -> Timeslice: ...
    def finish(self) -> list[tuple[str, float]]: ...

@final
class Timeslice:
    @property
    def index(self) -> int: ...
    @property
    def inputs(self) -> list[int]: ...
    @property
    def incomplete(self) -> bool: ...
    def components(self) -> list[Component]: ...
    def verify(self) -> None: ...
    def to_arrow(self) -> pa.RecordBatch: ...

@final
class TimesliceReceiver:
    def __new__(
        cls,
        name: str,
        *,
        stride: int = 1,
        offset: int = 0,
        queue: str = "all",
        group: int = 0,
        client: str = "python",
        wait: float = 10.0,
    ) -> TimesliceReceiver: ...
    def __iter__(self) -> TimesliceReceiver: ...
    def __next__(self) -> TakenTimeslice: ...
    def close(self) -> None: ...

@final
class TakenTimeslice:
    @property
    def index(self) -> int: ...
    @property
    def start_time(self) -> int: ...
    @property
    def duration(self) -> int: ...
    @property
    def flags(self) -> int: ...
    @property
    def num_core_microslices(self) -> int: ...
    @property
    def released(self) -> bool: ...
    def components(self) -> list[Component]: ...
    def verify(self) -> None: ...

@final
class Component:
    @property
    def microslices(self) -> int: ...
    def __len__(self) -> int: ...
    @property
    def address(self) -> int: ...

@final
class FrameNode:
    def __new__(
        cls,
        settings: RunSettings,
        listen: str,
        index: int = 0,
        key: bytes | None = None,
        gpu: int | None = None,
        frames: int = 8,
        frame_bytes: int | None = None,
        gpu_rings: bool = False,
    ) -> FrameNode: ...
    @property
    def url(self) -> str: ...
    @property
    def path(self) -> str: ...
    def __iter__(self) -> FrameNode: ...
    def __next__(self) -> Frame: ...
    def finish(self) -> list[tuple[str, float]]: ...

@final
class Frame:
    @property
    def index(self) -> int: ...
    @property
    def parts(self) -> list[tuple[int, int, int, int]]: ...
    @property
    def check(self) -> tuple[int, int]: ...
    @property
    def ready_after(self) -> float: ...
    @property
    def address(self) -> int: ...
    @property
    def device_name(self) -> str: ...
    def __len__(self) -> int: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...
    def __dlpack__(
        self,
        *,
        stream: object = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> object: ...
    @property
    def __cuda_array_interface__(self) -> dict[str, object]: ...

def feed(settings: RunSettings, index: int, urls: list[str], key: bytes | None = None) -> tuple[int, int]: ...
