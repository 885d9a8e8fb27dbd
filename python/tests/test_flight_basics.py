import pyarrow.flight as pf
import pytest

from wirespeed import flight
from conftest import KEY, plane, table


def test_python_server_with_wirespeed_client_over_shm(py_server):
    with flight.connect(py_server.location, key=KEY) as client:
        infos = list(client.list_flights())
        assert [i.descriptor.command for i in infos] == [b"small", b"t"]
        info = client.get_flight_info(pf.FlightDescriptor.for_command(b"t"))
        reader = client.do_get(info.endpoints[0].ticket)
        assert plane(reader) == "shm"
        assert reader.read_all().equals(table())


def test_python_server_with_pyarrow_client(py_server):
    client = pf.connect(py_server.location)
    info = client.get_flight_info(pf.FlightDescriptor.for_command(b"small"))
    assert client.do_get(info.endpoints[0].ticket).read_all().equals(table(100, seed=5))
    writer, meta = client.do_put(pf.FlightDescriptor.for_command(b"up"), table(10).schema)
    writer.write_table(table(10))
    writer.done_writing()
    assert meta.read().to_pybytes() == b"10 rows"
    writer.close()
    assert py_server.tables[b"up"].equals(table(10))
    assert list(client.do_action(pf.Action("echo", b"hi")))[0].body.to_pybytes() == b"hi"


@pytest.mark.parametrize("client", ["pyarrow", "shm", "tcp", "grpc"])
def test_python_server_acknowledges_each_batch_to_a_client_that_waits(py_server, client):
    if client == "pyarrow":
        # A missing acknowledgement fails after the timeout, rather than hanging.
        options = pf.FlightCallOptions(timeout=20)
        writer, meta = pf.connect(py_server.location).do_put(pf.FlightDescriptor.for_command(b"ack"),
                                                             table(10).schema, options)
    else:
        ours = flight.connect(py_server.location, key=KEY, transport=client if client != "shm" else "auto")
        writer, meta = ours.do_put(pf.FlightDescriptor.for_command(b"ack"), table(10).schema)
        assert plane(writer) == client
    for i in range(5):
        writer.write_batch(table(10 + i).to_batches()[0])
        assert meta.read().to_pybytes() == f"{i}: {10 + i} rows".encode()
    writer.done_writing()
    assert meta.read() is None
    writer.close()
