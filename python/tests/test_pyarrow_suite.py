"""pyarrow's own Flight tests (pyarrow/tests/test_flight.py, shipped in its wheel) run against
wirespeed.flight: their `flight`, `FlightClient` and `FlightServerBase` swapped for ours (see
pyarrow_suite/swap_in_wirespeed.py), without a key and with one. Every test that passes with
pyarrow itself on this machine must pass, with a key too (its data calls then run on a plane)."""

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

import tls_certs

HERE = Path(__file__).resolve().parent


def run_suite(tmp_path: Path, swap: bool, key: str | None) -> tuple[set[str], str]:
    env = dict(os.environ, ARROW_TEST_DATA=str(tls_certs.arrow_test_data(tmp_path / "arrow-testing")),
               # Its slow and large-memory tests too: cancelling, Ctrl-C, 2 GiB metadata.
               PYARROW_TEST_SLOW="1", PYARROW_TEST_LARGE_MEMORY="1")
    env.pop("WIRESPEED_KEY", None)
    if key:
        env["WIRESPEED_KEY"] = key
    # Ours at 20 s a test; pyarrow's own at more, so that a slow moment does not drop a test
    # from what ours must pass.
    timeout = "20" if swap else "60"
    args = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "--timeout", timeout,
            "--pyargs", "pyarrow.tests.test_flight"]
    if swap:
        args += ["-p", "swap_in_wirespeed"]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE / "pyarrow_suite"), env.get("PYTHONPATH")]))
    r = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    return set(re.findall(r"^PASSED \S*::(\S+)", r.stdout, re.M)), r.stdout[-6000:]


@pytest.fixture(scope="module")
def pyarrows_own(tmp_path_factory):
    passed, out = run_suite(tmp_path_factory.mktemp("pyarrow"), swap=False, key=None)
    assert len(passed) > 80, out
    return passed


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("keyed", [False, True], ids=["no key", "key"])
def test_pyarrows_flight_suite_passes_against_wirespeed(pyarrows_own, tmp_path, keyed):
    passed, out = run_suite(tmp_path, swap=True, key=secrets.token_hex(16) if keyed else None)
    missing = pyarrows_own - passed
    assert not missing, f"pass with pyarrow, not with wirespeed.flight: {sorted(missing)}\n{out}"
