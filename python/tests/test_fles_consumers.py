"""A Python consumer of `wirespeed fles run --output shm:NAME`, FLESnet's shared-memory
interface: every timeslice once with every CRC right; the builder's death ends the stream with
an error at once, not a hang."""

import contextlib
import os
import signal
import subprocess
import threading
import time

import pytest

import wirespeed
from wirespeed.fles import TimesliceReceiver

from conftest import BIN


def builder(layout, output, *extra):
    return subprocess.Popen([str(BIN), "fles", "run", f"--local={layout}", "--timeslice-size=10", "--timeout=20",
                             f"--output={output}", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def take_all(name, seen, errors):
    try:
        for ts in TimesliceReceiver(name, client="pytest"):
            ts.verify()
            parts = ts.components()
            assert [p.microslices for p in parts] == [11, 11]
            seen.append(ts.index)
    except Exception as e:  # reported by the test thread
        errors.append(e)


def test_every_timeslice_once_with_every_crc_right():
    name = f"wspy-all-{os.getpid()}"
    run = builder("2:2", f"shm:{name}?consumers=1", "--timeslices=200")
    seen, errors = [], []
    threads = [threading.Thread(target=take_all, args=(f"{name}.{c}", seen, errors)) for c in range(2)]
    for t in threads:
        t.start()
    out, err = run.communicate(timeout=60)
    for t in threads:
        t.join(timeout=30)
    assert run.returncode == 0, err
    assert not errors, errors
    assert sorted(seen) == list(range(200))


def test_a_released_timeslice_refuses_new_views():
    name = f"wspy-released-{os.getpid()}"
    run = builder("1:1", f"shm:{name}?consumers=1", "--timeslices=20")
    rx = TimesliceReceiver(name)
    first = next(rx)
    view = memoryview(first.components()[0])
    assert view.readonly and len(view) > 0
    view.release()
    second = next(rx)
    assert first.released and not second.released
    with pytest.raises(wirespeed.UsageError, match="released"):
        first.components()
    rx.close()
    run.communicate(timeout=60)
    assert run.returncode == 0


def test_the_builders_death_ends_the_stream_with_an_error():
    name = f"wspy-death-{os.getpid()}"
    run = builder("1:1", f"shm:{name}?consumers=1", "--timeslices=100000", "--rate=0.001")
    rx = TimesliceReceiver(name)
    next(rx)
    os.killpg(run.pid, signal.SIGKILL)
    # A killed builder cannot remove its segment (nor can FLESnet's): the operator does.
    with contextlib.suppress(FileNotFoundError):
        os.unlink(f"/dev/shm/{name}")
    started = time.monotonic()
    with pytest.raises(wirespeed.ConnectionFailedError, match="went away"):
        for _ in rx:
            pass
    assert time.monotonic() - started < 5
    run.communicate(timeout=10)
