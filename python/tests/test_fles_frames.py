"""Timeslices built in frames, handed over without a copy. Host frames run everywhere, through
the same path as a GPU's; numpy takes them by DLPack as CuPy and PyTorch take a GPU's
(test_gpu_frames.py runs those where a GPU is)."""

import numpy as np
import pytest

import wirespeed
from wirespeed import fles

SMALL = dict(microslice_size=200, timeslice_size=10)  # 11 microslices of 200 bytes per component


class LegacyOnly:
    """A producer as DLPack had it before version 1: no keyword arguments."""

    def __init__(self, frame):
        self.frame = frame

    def __dlpack__(self, stream=None):
        return self.frame.__dlpack__()

    def __dlpack_device__(self):
        return self.frame.__dlpack_device__()


def test_frames_come_out_checked_and_numpy_reads_them_in_place():
    run = fles.build(3, 30, gpu="host", **SMALL)
    seen = []
    for frame in run:
        assert frame.device_name == "cpu" and frame.__dlpack_device__() == (1, 0)
        assert frame.check == (33, 0)  # every microslice's CRC, checked where the frame lies
        parts = frame.parts
        assert [p[0] for p in parts] == [0, 1, 2] and [p[3] for p in parts] == [11, 11, 11]
        assert all(offset % 256 == 0 for _, offset, _, _ in parts)
        array = np.from_dlpack(frame)
        assert array.dtype == np.uint8 and array.shape == (len(frame),)
        assert array.ctypes.data == frame.address  # no copy
        assert bytes(memoryview(frame)) == array.tobytes()
        for _, offset, length, _ in parts:
            assert array[offset] == 0xDD and array[offset + 1] == 0x01  # a microslice descriptor's hdr_id, hdr_ver
        legacy = np.from_dlpack(LegacyOnly(frame))
        assert legacy.ctypes.data == frame.address
        assert not hasattr(frame, "__cuda_array_interface__")
        seen.append(frame.index)
        del array, legacy
    del frame
    assert seen == list(range(30))
    assert run.finish()["timeslices"] == 30


def test_a_frame_held_by_an_array_is_not_reused_until_it_goes():
    run = fles.build(2, 40, gpu="host", frames=3, **SMALL)
    frames = iter(run)
    first = next(frames)
    held, address = np.from_dlpack(first), first.address
    snapshot = held.copy()
    untaken = first.__dlpack__()  # a capsule nobody takes holds the frame too, until it goes
    del first
    for _ in range(10):
        frame = next(frames)
        assert frame.address != address
        del frame
    del untaken
    for _ in range(5):
        frame = next(frames)
        assert frame.address != address
        del frame
    assert np.array_equal(held, snapshot)  # nothing was built into it meanwhile
    del held
    addresses = set()
    for frame in frames:
        addresses.add(frame.address)
        del frame
    assert address in addresses
    assert run.finish()["timeslices"] == 40


def test_what_a_frame_cannot_give_is_a_clear_error():
    run = fles.build(1, 3, gpu="host", **SMALL)
    frame = next(iter(run))
    with pytest.raises(BufferError, match="copy"):
        frame.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="cpu"):
        frame.__dlpack__(dl_device=(2, 0))
    assert memoryview(frame).readonly
    del frame
    for frame in run:
        del frame
    run.finish()


def test_a_gpu_that_is_not_there_is_a_gpu_error():
    with pytest.raises(wirespeed.GpuError, match="no GPU"):
        fles.build(1, 3, gpu=64, **SMALL)
    with pytest.raises(wirespeed.UsageError):
        fles.build(1, 3, gpu="cuda", **SMALL)
