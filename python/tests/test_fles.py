"""Timeslice building from Python: a builder in this process, and a compute node fed by the
`wirespeed fles` CLI's own input processes is left to the CLI's tests."""

import time

import pytest

import wirespeed
from wirespeed import fles


@pytest.mark.parametrize("scheduler,transport", [("rr", "shm"), ("dfs", "tcp")])
def test_build_hands_out_every_timeslice_in_order(scheduler, transport):
    run = fles.build(3, 40, scheduler=scheduler, transport=transport, microslice_size=200, timeslice_size=10)
    seen, held = [], []
    for ts in run:
        ts.verify()
        components = ts.components()
        assert ts.inputs == [0, 1, 2] and not ts.incomplete
        assert [c.microslices for c in components] == [11, 11, 11]  # 10 core + 1 overlap
        view = memoryview(components[0])
        assert view.readonly and len(view) == len(components[0])
        if ts.index == 5:
            batch = ts.to_arrow()
            assert batch.num_rows == 33 and set(batch.column("component").to_pylist()) == {0, 1, 2}
            assert batch.column("timeslice").to_pylist() == [5] * 33
        seen.append(ts.index)
        held.append(ts)  # keeping a few is fine; their ring space comes back when dropped
        if len(held) > 4:
            held.clear()
    del ts, components, view  # the last timeslice, held by the loop's names
    held.clear()
    assert seen == list(range(40))
    summary = run.finish()
    assert summary["timeslices"] == 40 and summary["lost_inputs"] == 0


def test_components_live_in_the_compute_nodes_rings():
    run = fles.build(2, 3, scheduler="rr", microslice_size=100, timeslice_size=4)
    ts = next(iter(run))
    component = ts.components()[1]
    del ts  # the component keeps its timeslice
    assert bytes(memoryview(component))[:2] == bytes([0xDD, 0x01])  # a microslice descriptor's hdr_id, hdr_ver
    del component
    for ts in run:
        pass
    del ts
    assert run.finish()["timeslices"] == 3


def test_bad_settings_are_usage_errors():
    with pytest.raises(wirespeed.UsageError):
        fles.RunSettings(0)
    with pytest.raises(wirespeed.UsageError):
        fles.RunSettings(2, scheduler="fifo")
    with pytest.raises(wirespeed.UsageError):
        fles.RunSettings(2, monitor=["udp:host:1"])


def test_live_metrics_go_where_flesnets_go(tmp_path):
    """`monitor` takes `fles run -m`'s sinks: here a file of InfluxDB line protocol."""
    path = tmp_path / "run.lp"
    run = fles.build(2, 30, scheduler="rr", microslice_size=100, timeslice_size=5, monitor=[f"file:{path}"])
    for ts in run:
        pass
    del ts
    assert run.finish()["timeslices"] == 30
    deadline = time.monotonic() + 10
    while "timeslices=30," not in (path.read_text() if path.exists() else ""):
        assert time.monotonic() < deadline, "the node's last point never came"
        time.sleep(0.1)
    lines = path.read_text().splitlines()
    assert any(line.startswith("fles_input,host=") for line in lines)


MPI_RANK = """
import json, os, sys
from wirespeed import fles
node = fles.run_mpi(2, 30, scheduler=sys.argv[1], transport="tcp", host="127.0.0.1", key="mpi test key",
                    microslice_size=100, timeslice_size=5)
seen, ts = [], None
for ts in node:
    ts.verify()
    seen.append(ts.index)
del ts  # the last timeslice, released
# A file per rank: mpirun may interleave the ranks' lines on its stdout.
with open(os.path.join(sys.argv[2], f"{node.rank}.json"), "w") as f:
    json.dump({"rank": node.rank, "role": node.role, "seen": seen, **node.finish()}, f)
"""


@pytest.mark.parametrize("scheduler", ["rr", "dfs"])
def test_run_mpi_one_node_per_rank(scheduler, tmp_path):
    """mpirun starts 2 inputs and 2 compute nodes; every timeslice is built once, in order on
    each compute node."""
    import json
    import subprocess
    import sys

    done = subprocess.run(["mpirun", "--oversubscribe", "--bind-to", "none", "--allow-run-as-root", "-n", "4",
                           sys.executable, "-c", MPI_RANK, scheduler, str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    ranks = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in range(4)]
    assert [r["role"] for r in ranks] == ["input", "input", "compute", "compute"]
    built = ranks[2]["seen"] + ranks[3]["seen"]
    assert sorted(built) == list(range(30))
    assert all(r["seen"] == sorted(r["seen"]) for r in ranks[2:])
    assert ranks[0]["components"] == ranks[1]["components"] == 30
