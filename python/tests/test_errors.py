"""The exception classes are one table with the CLI's exit codes (`wirespeed::Class`), and
wirespeed.flight's are pyarrow's and that table's at once."""

import builtins

import pyarrow as pa
import pyarrow.flight as pf

import wirespeed
from wirespeed import _flight_base, _native, flight


def test_each_class_of_failure_has_its_exception_and_the_clis_exit_code():
    table = _native._error_classes()
    assert len({name for name, _ in table}) == len(table) == 11
    for name, exit_code in table:
        cls = getattr(wirespeed, name)
        assert issubclass(cls, wirespeed.Error) and name in wirespeed.__all__
        assert cls.exit_code == exit_code, name
    assert issubclass(wirespeed.ConnectionFailedError, ConnectionError)
    assert issubclass(wirespeed.TimedOutError, TimeoutError)
    assert issubclass(wirespeed.FileError, OSError)


def test_no_name_the_package_exports_shadows_a_builtin():
    assert not [name for name in wirespeed.__all__ if hasattr(builtins, name)]
    assert not [name for name in flight.__all__ if hasattr(builtins, name)]


def test_a_flight_error_is_pyarrows_class_and_the_class_of_its_code():
    """The classes wirespeed.flight raises, on gRPC and every plane (wirespeed._flight_base's),
    against pyarrow's that wirespeed.flight exports by the same names."""
    pyarrows = {"FlightNotFoundError": pa.ArrowKeyError, "FlightInvalidArgumentError": pa.ArrowInvalid,
                "FlightNotImplementedError": pa.ArrowNotImplementedError,
                "FlightAlreadyExistsError": pa.ArrowException}
    for flight_name, class_name in _native._flight_classes():
        cls = getattr(_flight_base, flight_name)
        assert issubclass(cls, getattr(wirespeed, class_name)), (flight_name, class_name)
        assert issubclass(cls, pyarrows.get(flight_name) or getattr(pf, flight_name, pf.FlightServerError))
        assert cls.exit_code == getattr(wirespeed, class_name).exit_code, flight_name


def test_a_bad_key_is_an_authentication_error_as_the_cli_says():
    try:
        wirespeed.listen("tcp://127.0.0.1:0", key="")
    except wirespeed.Error as e:
        assert isinstance(e, wirespeed.AuthenticationError) and e.exit_code == 3, repr(e)
    else:
        raise AssertionError("an empty key was taken")
