"""Files from Python: local copies and transfers, with the CLI's error classes."""

import os
import re
import threading

import pytest

import wirespeed
from conftest import BIN, KEY


def tree(root):
    (root / "sub").mkdir(parents=True)
    (root / "a.bin").write_bytes(os.urandom(3 << 20))
    (root / "sub" / "b.txt").write_text("hello\n")
    (root / "skip.tmp").write_text("left out")


def test_cp_a_tree_with_progress(tmp_path):
    tree(tmp_path / "src")
    seen = []
    summary = wirespeed.cp(tmp_path / "src", tmp_path / "dst", recursive=True, exclude=["*.tmp"],
                           progress=lambda b, total, files: seen.append((b, total, files)))
    assert (tmp_path / "dst" / "a.bin").read_bytes() == (tmp_path / "src" / "a.bin").read_bytes()
    assert (tmp_path / "dst" / "sub" / "b.txt").read_text() == "hello\n"
    assert not (tmp_path / "dst" / "skip.tmp").exists()
    assert summary["files"] == 2 and summary["bytes"] == (3 << 20) + 6
    assert seen and seen[-1][0] == summary["bytes"]


def test_cp_errors(tmp_path):
    with pytest.raises(wirespeed.FileError) as e:
        wirespeed.cp(tmp_path / "missing", tmp_path / "x")
    assert e.value.exit_code == 5 and isinstance(e.value, OSError)
    (tmp_path / "d").mkdir()
    with pytest.raises(wirespeed.Error):
        wirespeed.cp(tmp_path / "d", tmp_path / "x")  # a directory without recursive
    with pytest.raises(wirespeed.UsageError):
        wirespeed.cp([tmp_path / "d", "host:/elsewhere"], tmp_path / "x", recursive=True)
    with pytest.raises(wirespeed.UsageError):
        wirespeed.cp(tmp_path / "d", tmp_path / "x", transport="pigeon")


def test_cp_between_hosts_over_ssh(tmp_path, sshd):
    tree(tmp_path / "src")
    for where in ("up", "down", "across"):
        (tmp_path / where).mkdir()  # each copy lands in it as src/, as cp -r does
    remote = lambda p: f"127.0.0.1:{p}"  # noqa: E731
    far = {"ssh": sshd, "remote_bin": str(BIN)}
    seen = []
    up = wirespeed.cp(tmp_path / "src", remote(tmp_path / "up"), recursive=True, preserve=True, **far,
                      progress=lambda b, total, files: seen.append(b))
    assert up["files"] == 3 and seen[-1] == up["bytes"]
    down = wirespeed.cp(remote(tmp_path / "up" / "src"), tmp_path / "down", recursive=True, exclude=["*.tmp"],
                        transport="tcp", **far)
    across = wirespeed.cp(remote(tmp_path / "down" / "src"), remote(tmp_path / "across"), recursive=True,
                          encrypt=True, compress=3, **far)
    assert down["files"] == across["files"] == 2
    for where in ("up", "down", "across"):
        assert (tmp_path / where / "src" / "a.bin").read_bytes() == (tmp_path / "src" / "a.bin").read_bytes()
    assert (tmp_path / "up" / "src" / "skip.tmp").exists() and not (tmp_path / "across" / "src" / "skip.tmp").exists()
    # Again with sync: everything is in place already.
    again = wirespeed.cp(tmp_path / "src", remote(tmp_path / "up"), recursive=True, sync=True, **far)
    assert again["kept"] == 3
    # A dry run with delete, here and through an agent: the lines the CLI lists, nothing done.
    (tmp_path / "down" / "src" / "stale.txt").write_text("old")
    (tmp_path / "src" / "new.txt").write_text("new")
    for dst in (tmp_path / "down", remote(tmp_path / "down")):
        said = []
        wirespeed.cp(tmp_path / "src", dst, recursive=True, sync=True, delete=True, dry_run=said.append, **far)
        assert any(line.endswith("/down/src/new.txt") for line in said), said
        assert any(line.startswith("deleting ") and line.endswith("/down/src/stale.txt") for line in said), said
        assert (tmp_path / "down" / "src" / "stale.txt").exists() and not (tmp_path / "down" / "src" / "new.txt").exists()


def test_cp_between_hosts_fails_in_the_far_ends_words(tmp_path, sshd):
    far = {"ssh": sshd, "remote_bin": str(BIN)}
    with pytest.raises(wirespeed.FileError) as e:
        wirespeed.cp(f"127.0.0.1:{tmp_path}/missing", tmp_path / "x", **far)
    assert "missing" in str(e.value) and e.value.exit_code == 5
    with pytest.raises(wirespeed.ConnectionFailedError):
        wirespeed.cp(tmp_path, "127.0.0.1:/tmp/x", recursive=True, ssh=re.sub(r"-p \d+", "-p 1", sshd),
                     remote_bin=str(BIN))
    with pytest.raises(wirespeed.Error) as e:
        wirespeed.cp(tmp_path, f"127.0.0.1:{tmp_path}/y", recursive=True, ssh=sshd, remote_bin="/no/such/wirespeed")
    assert "wirespeed" in str(e.value)


def test_send_files_to_a_receiver(tmp_path):
    tree(tmp_path / "src")
    receiver = wirespeed.Receiver("127.0.0.1:0", key=KEY)
    got = {}
    t = threading.Thread(target=lambda: got.update(receiver.receive(tmp_path / "dst", timeout=30)))
    t.start()
    sent = wirespeed.send_files(f"127.0.0.1:{receiver.port}", tmp_path / "src", key=KEY, recursive=True)
    t.join()
    assert sent["files"] == got["files"] == 3
    assert (tmp_path / "dst" / "a.bin").read_bytes() == (tmp_path / "src" / "a.bin").read_bytes()


def test_send_with_a_wrong_key_and_a_receiver_that_waits_in_vain(tmp_path):
    (tmp_path / "f").write_text("x")
    receiver = wirespeed.Receiver("127.0.0.1:0", key=KEY)
    with pytest.raises(wirespeed.AuthenticationError):
        wirespeed.send_files(f"127.0.0.1:{receiver.port}", tmp_path / "f", key="wrong")
    with pytest.raises(wirespeed.AuthenticationError, match="rejected a client"):
        receiver.receive(tmp_path / "out", timeout=0.3)  # names whom it turned away
    with pytest.raises(wirespeed.TimedOutError):
        wirespeed.Receiver("127.0.0.1:0", key=KEY).receive(tmp_path / "out", timeout=0.3)
    assert not (tmp_path / "out").exists()
