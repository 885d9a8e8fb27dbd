"""wirespeed: fast, authenticated data movement between processes and hosts.

- `wirespeed.flight`: Arrow Flight shaped like `pyarrow.flight`, whose data can travel over
  shared memory, UCX, libfabric or TCP instead of gRPC.
- `listen` / `connect`: wirespeed's own connections and streams of messages.
- `cp`, `send_files`, `Receiver`: files, as the `wirespeed` CLI copies them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Union

from . import _native
from ._errors import (
    AuthenticationError,
    ChecksumError,
    ConnectionFailedError,
    Error,
    FileError,
    GpuError,
    LimitError,
    NotFoundError,
    ProtocolError,
    TimedOutError,
    UsageError,
)
from ._native import Body, Connection, CopyOptions, Listener, Stream

__version__: str = _native.__version__

__all__ = [
    "AuthenticationError",
    "Body",
    "ChecksumError",
    "Connection",
    "ConnectionFailedError",
    "CopyOptions",
    "Error",
    "FileError",
    "GpuError",
    "LimitError",
    "Listener",
    "NotFoundError",
    "ProtocolError",
    "Receiver",
    "Stream",
    "TimedOutError",
    "UsageError",
    "connect",
    "cp",
    "listen",
    "send_files",
]

Key = Union[str, bytes, None]
PathLike = Union[str, "os.PathLike[str]"]
Progress = Callable[[int, int, int], object]


def _key(key: Key) -> bytes | None:
    return key.encode() if isinstance(key, str) else key


def listen(url: str, key: Key = None, timeout: float | None = None) -> Listener:
    """Listens on `url` (`tcp://HOST:PORT`, `shm://PATH`, `ucx://HOST:PORT`, `ofi+tcp://…`).

    Peers must prove they hold `key` (else WIRESPEED_KEY); it never travels. `timeout` bounds
    every wait on the connections accepted (default 30 s).
    """
    return _native.listen(url, _key(key), timeout)


def connect(url: str, key: Key = None, timeout: float | None = None) -> Connection:
    """Connects to a wirespeed listener at `url` and authenticates with `key`."""
    return _native.connect(url, _key(key), timeout)


def cp(
    src: PathLike | Iterable[PathLike],
    dst: PathLike,
    recursive: bool = False,
    *,
    progress: Progress | None = None,
    ssh: str = "ssh",
    remote_bin: str = "wirespeed",
    ports: str | None = None,
    **options: object,
) -> dict[str, int]:
    """Copies files or trees, as `wirespeed cp` does, here or between hosts.

    Any place may be `[user@]host:path` (as with scp): there `ssh` (a command with its
    options, as `wirespeed cp -e` takes it) starts `remote_bin agent`, and the data goes
    straight between the two ends, never through ssh. Several sources (all here, or all on
    one host) go into `dst` as a directory. `ports` (`LO-HI`) confines where remote ends
    listen. Every file is written under a hidden name, checked, and renamed into place only
    once complete. `options` are `CopyOptions`' (preserve, resume, sync, no_clobber, delete,
    exclude, transport, streams, bwlimit_mb, compress, encrypt, direct, dry_run). With
    `dry_run=print` (any callable) nothing changes, and each line `wirespeed cp --dry-run`
    would list is handed to it. `progress(bytes, total, files)` is called as it goes. Returns
    the summary (files, bytes, kept, ...).
    """
    sources = [src] if isinstance(src, (str, os.PathLike)) else list(src)
    opts = CopyOptions(recursive=recursive, **options)  # type: ignore[arg-type]
    places = [os.fspath(s) for s in sources]
    return dict(_native.copy(places, os.fspath(dst), opts, ssh, remote_bin, ports, progress))


def send_files(
    to: str,
    paths: PathLike | Iterable[PathLike],
    key: Key = None,
    recursive: bool = False,
    *,
    progress: Progress | None = None,
    **options: object,
) -> dict[str, int]:
    """Sends files to a `Receiver` or a `wirespeed recv` listening at `to` (`HOST:PORT`)."""
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    opts = CopyOptions(recursive=recursive, **options)  # type: ignore[arg-type]
    return dict(_native.send_files(to, [os.fspath(p) for p in paths], opts, _key(key), progress))


class Receiver:
    """Waits for one sender (`send_files` or `wirespeed send`) on `listen` (`HOST:PORT`; port 0
    picks one, see `port`) and writes what it sends under a path."""

    def __init__(self, listen: str = "0.0.0.0:7470", key: Key = None, **options: object) -> None:
        self._native = _native.Receiver(listen, CopyOptions(**options), _key(key))  # type: ignore[arg-type]

    @property
    def port(self) -> int:
        return self._native.port

    def receive(self, dst: PathLike, timeout: float = 600.0, progress: Progress | None = None) -> dict[str, int]:
        """Waits up to `timeout` seconds for the sender, then receives into `dst` (a file, or a
        directory for several files or a tree)."""
        return dict(self._native.receive(os.fspath(dst), timeout, progress))
