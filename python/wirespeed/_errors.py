"""The exception classes, one per class of failure (`wirespeed::Class`). Each carries
`exit_code`, the `wirespeed` CLI's exit status for the same failure, and derives from the
built-in class a Python caller would expect, without taking a built-in's name."""


class Error(Exception):
    """Every error wirespeed raises."""

    exit_code = 1


class UsageError(Error, ValueError):
    """A bad argument: an unknown transport, a malformed URL, an empty key."""

    exit_code = 2


class AuthenticationError(Error, PermissionError):
    """The peer does not hold the same key, or refused this one."""

    exit_code = 3


class ConnectionFailedError(Error, ConnectionError):
    """The peer is unreachable, went away, or gave up on the transfer. Also a built-in
    `ConnectionError`, whose name it does not take."""

    exit_code = 4


class TimedOutError(Error, TimeoutError):
    """A wait ran past its limit. Also a built-in `TimeoutError`."""

    exit_code = 4


class ProtocolError(Error):
    """The peer sent something malformed or speaks another version."""

    exit_code = 4


class FileError(Error, OSError):
    """A file could not be read or written (at either end)."""

    exit_code = 5


class ChecksumError(Error):
    """Data arrived corrupted and was not kept."""

    exit_code = 6


class LimitError(Error):
    """A size or count past what this end or the peer allows: a header over the peer's
    window, more streams than it takes, memory that could not be had."""

    exit_code = 1


class NotFoundError(Error, LookupError):
    """What was asked for does not exist."""

    exit_code = 1


class GpuError(Error):
    """No GPU (no driver, no such device), or the GPU failed: out of memory, a driver error."""

    exit_code = 1


# Shown as wirespeed.X in tracebacks, where users catch them.
for _class in (Error, UsageError, AuthenticationError, ConnectionFailedError, TimedOutError, ProtocolError, FileError,
               ChecksumError, LimitError, NotFoundError, GpuError):
    _class.__module__ = "wirespeed"
