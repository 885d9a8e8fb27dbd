"""wirespeed's own connections and streams from Python."""

import threading

import pytest

import wirespeed
from conftest import KEY


def pair(url):
    listener = wirespeed.listen(url, key=KEY)
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("server", listener.accept(timeout=10)))
    t.start()
    client = wirespeed.connect(listener.url, key=KEY)
    t.join()
    return client, box["server"]


def in_mapping(address, name):
    for line in open("/proc/self/maps"):
        fields = line.split()
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        if lo <= address < hi:
            return name in " ".join(fields[5:])
    return False


@pytest.mark.parametrize("url", ["tcp://127.0.0.1:0", "shm://@wirespeed-pytest-core"])
def test_messages_both_ways(url):
    client, server = pair(url)
    out = client.open_stream()
    payload = bytearray(range(256)) * 4096  # 1 MiB, any buffer-protocol object
    out.send(payload, header=b"h1")
    out.send([b"two ", memoryview(b"parts")])
    out.finish()
    inc = server.accept_stream(timeout=10)
    header, body = inc.recv()
    assert header == b"h1" and len(body) == len(payload)
    view = memoryview(body)
    assert view.readonly and view == payload
    if url.startswith("shm"):
        assert in_mapping(body.address, "memfd:wirespeed-shm"), "received in place, in the ring"
    header, body = inc.recv()
    assert bytes(body) == b"two parts"
    assert inc.recv() is None
    with pytest.raises(TypeError):
        memoryview(body)[0:1] = b"x"  # read-only
    client.close()
    server.close()


@pytest.mark.parametrize("url", ["tcp://127.0.0.1:0", "shm://@wirespeed-pytest-big"])
def test_bodies_larger_than_the_window_arrive_whole_and_in_one_piece(url):
    client, server = pair(url)
    out = client.open_stream()
    big = bytes(range(251)) * (160 << 10)  # 40 MiB: over the 16 MiB stream window and the ring

    def send_twice():
        out.send(big)
        out.send(big)
        out.finish()

    sender = threading.Thread(target=send_twice)
    sender.start()
    inc = server.accept_stream(timeout=10)
    for _ in range(2):
        _, body = inc.recv()
        assert memoryview(body) == big
        del body  # its memory is reused for the next
    assert inc.recv() is None
    sender.join()
    client.close()
    server.close()


def test_wrong_key_and_bad_urls():
    listener = wirespeed.listen("tcp://127.0.0.1:0", key=KEY)
    accepted = {}

    def accept():
        try:
            accepted["connection"] = listener.accept(timeout=10)
        except wirespeed.Error as e:
            accepted["error"] = e

    server = threading.Thread(target=accept)
    server.start()
    with pytest.raises(wirespeed.AuthenticationError) as e:
        wirespeed.connect(listener.url, key="another key")
    assert e.value.exit_code == 3
    server.join(15)
    # The server side refused the client too, and says why.
    assert isinstance(accepted.get("error"), wirespeed.AuthenticationError), accepted
    with pytest.raises(wirespeed.UsageError):
        wirespeed.connect("smoke://signals", key=KEY)
    with pytest.raises(wirespeed.ConnectionFailedError):
        wirespeed.connect("tcp://127.0.0.1:1", key=KEY)
    with pytest.raises(wirespeed.TimedOutError):
        listener.accept(timeout=0.2)
