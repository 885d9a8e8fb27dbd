"""Frames in GPU memory, handed to CuPy and PyTorch without a copy. Runs where a GPU and CuPy
are (bench/gpu_device.sh runs it on the lent GPU machine); skipped elsewhere."""

import pytest

import wirespeed
from wirespeed import fles

cupy = pytest.importorskip("cupy")
try:
    if cupy.cuda.runtime.getDeviceCount() < 1:
        pytest.skip("no GPU", allow_module_level=True)
except cupy.cuda.runtime.CUDARuntimeError:
    pytest.skip("no GPU", allow_module_level=True)

np = pytest.importorskip("numpy")

# 8 inputs, components of 101 microslices of 2,000 bytes (about 200 KiB).
SETTINGS = dict(microslice_size=2000, timeslice_size=100)


def components(parts, data):
    return {input: data[offset:offset + length] for input, offset, length, _ in parts}


def host_frames(inputs, count):
    """Each frame's components as the same run builds them in host frames (generated
    microslices are the same in every run; where each lands depends on when it arrived)."""
    host = {}
    run = fles.build(inputs, count, gpu="host", **SETTINGS)
    for frame in run:
        host[frame.index] = components(frame.parts, np.from_dlpack(frame).copy())
        del frame
    run.finish()
    return host


def check_against(run, host, inputs):
    """Every frame of `run` is checked on the GPU and holds, byte for byte, what `host` does;
    returns the microslices checked."""
    checked = 0
    for frame in run:
        assert frame.device_name == "cuda:0" and frame.__dlpack_device__() == (2, 0)
        microslices, bad = frame.check
        assert bad == 0 and microslices == inputs * 101
        checked += microslices
        assert [p[0] for p in frame.parts] == list(range(inputs))
        on_gpu = cupy.from_dlpack(frame)
        assert on_gpu.data.ptr == frame.address and on_gpu.size == len(frame)  # no copy
        got = components(frame.parts, cupy.asnumpy(on_gpu))
        expected = host[frame.index]
        assert all(np.array_equal(got[i], expected[i]) for i in range(inputs))
        del on_gpu, frame
    return checked


def test_eight_inputs_every_crc_right_and_the_bytes_the_host_builds():
    count = 200
    host = host_frames(8, count)
    run = fles.build(8, count, gpu=0, **SETTINGS)
    assert check_against(run, host, 8) == count * 8 * 101
    assert "page-locked" in run.node.path
    assert run.finish()["timeslices"] == count


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_gpu_rings_where_the_transport_can_and_host_rings_where_not(transport):
    """With gpu_rings, inputs over shm put straight into rings in GPU memory (in this process:
    its own device addresses); tcp cannot, so its rings stay on the host and the path says why.
    Either way every frame is what host frames hold."""
    count = 100
    host = host_frames(4, count)
    run = fles.build(4, count, gpu=0, gpu_rings=True, transport=transport, **SETTINGS)
    assert check_against(run, host, 4) == count * 4 * 101
    path = run.node.path
    if transport == "shm":
        assert path.startswith("put by the inputs into rings in GPU memory over shm"), path
    else:
        assert "page-locked" in path and "GPU rings refused over tcp" in path, path
    assert run.finish()["timeslices"] == count


def test_torch_and_the_cuda_array_interface_see_the_frame_in_place():
    torch = pytest.importorskip("torch")
    run = fles.build(2, 20, gpu=0, **SETTINGS)
    for frame in run:
        t = torch.from_dlpack(frame)
        assert t.is_cuda and t.dtype == torch.uint8 and t.data_ptr() == frame.address
        c = cupy.asarray(frame)  # by __cuda_array_interface__
        assert c.data.ptr == frame.address
        for _, offset, _, _ in frame.parts:
            assert int(t[offset]) == 0xDD and int(c[offset + 1]) == 0x01
        del t, c, frame
    run.finish()


def test_a_frame_held_by_cupy_is_not_reused_until_released():
    run = fles.build(2, 60, gpu=0, frames=3, **SETTINGS)
    frames = iter(run)
    first = next(frames)
    held, address = cupy.from_dlpack(first), first.address
    snapshot = held.copy()
    del first
    for _ in range(20):
        frame = next(frames)
        assert frame.address != address
        del frame
    cupy.cuda.Device().synchronize()
    assert bool((held == snapshot).all())  # nothing was built into it meanwhile
    del held
    reused = False
    for frame in frames:
        reused |= frame.address == address
        del frame
    assert reused
    assert run.finish()["timeslices"] == 60


def test_gpu_errors_are_clear():
    with pytest.raises(wirespeed.GpuError, match="no device 64"):
        fles.build(1, 3, gpu=64, **SETTINGS)
    with pytest.raises(wirespeed.GpuError, match="(?i)out of memory"):
        fles.build(1, 3, gpu=0, frames=4, frame_bytes=1 << 40, **SETTINGS)
    # The GPU is still usable afterwards.
    run = fles.build(1, 3, gpu=0, **SETTINGS)
    assert [f.check[1] for f in run] == [0, 0, 0]
    run.finish()
