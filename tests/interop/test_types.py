"""Every Arrow type pyarrow writes, uploaded by pyarrow to `wirespeed serve` and read back through
gRPC (pyarrow) and every data plane (`wirespeed get`), each checked equal with its metadata."""
from decimal import Decimal

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.flight as flight
import pytest

from conftest import Proc, free_port, run


def dense_union():
    return pa.UnionArray.from_dense(
        pa.array([0, 1, 0, 1, 0], pa.int8()), pa.array([0, 0, 1, 1, 2], pa.int32()),
        [pa.array([1, None, 3], pa.int64()), pa.array(["a", "b"])], ["i", "s"])


def sparse_union():
    return pa.UnionArray.from_sparse(
        pa.array([1, 0, 1, 0, 0], pa.int8()),
        [pa.array([10, 11, 12, 13, 14], pa.int32()), pa.array([0.5, None, 2.5, 3.5, 4.5])], ["n", "f"])


def decimals(kind, precision):
    values = [Decimal("1.25"), None, Decimal("-99.99"), Decimal("0.00"), Decimal("12.5")]
    return pa.array(values, kind(precision, 2))


def columns():
    n = 5
    strings = ["short", "a string longer than twelve bytes", None, "", "x"]
    return {
        "null": pa.nulls(n),
        "bool": pa.array([True, False, None, True, False]),
        "int8": pa.array([1, -2, None, 4, 5], pa.int8()),
        "uint64": pa.array([1, 2, None, 2**64 - 1, 0], pa.uint64()),
        "float16": pa.array([1.5, None, -2.0, 0.25, 8.0], pa.float16()),
        "float64": pa.array([1.5, None, float("inf"), -0.0, 1e300]),
        "decimal32": decimals(pa.decimal32, 7),
        "decimal64": decimals(pa.decimal64, 15),
        "decimal128": decimals(pa.decimal128, 30),
        "decimal256": decimals(pa.decimal256, 60),
        "date32": pa.array([0, 19000, None, -1, 1], pa.date32()),
        "date64": pa.array([0, 86_400_000, None, 2 * 86_400_000, 3 * 86_400_000], pa.date64()),
        "time32": pa.array([0, 1000, None, 86_399, 5], pa.time32("s")),
        "time64": pa.array([0, 1000, None, 86_399_999_999, 5], pa.time64("us")),
        "timestamp_tz": pa.array([0, 1_700_000_000_000_000, None, -5, 7], pa.timestamp("us", tz="Europe/Berlin")),
        "duration": pa.array([0, -5, None, 10**12, 3], pa.duration("ns")),
        "interval": pa.array([(1, 2, 3), None, (0, 0, 0), (-1, 15, 10**9), (12, 0, 1)],
                             pa.month_day_nano_interval()),
        "binary": pa.array([b"a", None, b"", b"\x00\xff", b"b"]),
        "fixed_binary": pa.array([b"ab", b"cd", None, b"ef", b"gh"], pa.binary(2)),
        "large_string": pa.array(strings, pa.large_string()),
        "large_binary": pa.array([b"a", None, b"b" * 100, b"", b"c"], pa.large_binary()),
        "string_view": pa.array(strings, pa.string_view()),
        "binary_view": pa.array([b"a", None, b"b" * 40, b"", b"c"], pa.binary_view()),
        "list": pa.array([[1, 2], [], None, [3], [None]], pa.list_(pa.int32())),
        "large_list": pa.array([[1, 2], [], None, [3], [4]], pa.large_list(pa.int64())),
        "fixed_list": pa.array([[1, 2], [3, 4], None, [5, 6], [7, None]], pa.list_(pa.int16(), 2)),
        "list_view": pa.array([[1, 2], [], None, [3], [4, 5, 6]], pa.list_view(pa.int32())),
        "large_list_view": pa.array([[1], [], None, [3, 4], [5]], pa.large_list_view(pa.int32())),
        "struct": pa.array([{"a": 1, "b": "x"}, None, {"a": None, "b": "y"}, {"a": 4, "b": None}, {"a": 5, "b": "z"}]),
        "map": pa.array([[("k", 1)], [], None, [("a", 2), ("b", 3)], [("z", None)]], pa.map_(pa.string(), pa.int64())),
        "dense_union": dense_union(),
        "sparse_union": sparse_union(),
        "run_end": pa.RunEndEncodedArray.from_arrays(pa.array([2, 4, 5], pa.int32()), pa.array(["x", None, "z"])),
        "dictionary": pa.array(["red", "green", None, "red", "blue"]).dictionary_encode(),
        "nested_dictionary": pa.array([["a", "b"], [], None, ["b"], ["c", "a"]],
                                      pa.list_(pa.dictionary(pa.int32(), pa.string()))),
        "uuid": pa.array([b"\x01" * 16, None, b"\x02" * 16, b"\x03" * 16, b"\x04" * 16], pa.uuid()),
        "tensor": pa.ExtensionArray.from_storage(
            pa.fixed_shape_tensor(pa.int32(), [2, 2]),
            pa.array([list(range(i, i + 4)) for i in range(5)], pa.list_(pa.int32(), 4))),
    }


def every_type():
    cols = columns()
    fields = [pa.field(name, a.type, metadata={"about": name}) for name, a in cols.items()]
    schema = pa.schema(fields, metadata={"owner": "interop", "unicode": "naïve ✓"})
    return pa.Table.from_arrays(list(cols.values()), schema=schema)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("types")
    proc = Proc(["serve", str(data), "--listen", f"127.0.0.1:{free_port()}"])
    proc.dir = data
    yield proc
    proc.stop()


def upload(url, name, t, batches=None):
    c = flight.connect(url)
    writer, reader = c.do_put(flight.FlightDescriptor.for_path(name), t.schema)
    for b in (t.to_batches(max_chunksize=2) if batches is None else batches):
        writer.write_batch(b)
    writer.done_writing()
    reader.read()
    writer.close()


def read_back(server, name, tmp_path):
    """The flight as pyarrow reads it over gRPC, and as `wirespeed get` writes it from each plane."""
    c = flight.connect(server.url)
    info = c.get_flight_info(flight.FlightDescriptor.for_path(name))
    out = {"pyarrow grpc": c.do_get(info.endpoints[0].ticket).read_all()}
    for plane in ["grpc", "shm", "tcp", "ucx"]:
        dest = tmp_path / f"{plane}-{name}"
        r = run("get", server.url, name, "-o", str(dest), "--transport", plane)
        assert r.returncode == 0, f"{plane}: {r.stderr}"
        out[f"get over {plane}"] = feather.read_table(dest)
    return out


@pytest.mark.parametrize("rows", [5, 0])
def test_every_type_round_trips_on_every_plane(server, tmp_path, rows):
    t = every_type().slice(0, rows)
    name = f"every_type_{rows}.arrow"
    upload(server.url, name, t)
    assert feather.read_table(server.dir / name).equals(t, check_metadata=True)
    for how, got in read_back(server, name, tmp_path).items():
        assert got.schema.equals(t.schema, check_metadata=True), how
        assert got.equals(t), how


def test_a_zero_batch_stream_round_trips(server, tmp_path):
    t = every_type().slice(0, 0)
    upload(server.url, "no_batches.arrow", t, batches=[])
    for how, got in read_back(server, "no_batches.arrow", tmp_path).items():
        assert got.num_rows == 0 and got.schema.equals(t.schema, check_metadata=True), how


def test_a_dense_union_beside_another_in_a_zero_row_batch(server, tmp_path):
    """pyarrow puts union offsets at any alignment in the gRPC body."""
    arrays = [dense_union(), sparse_union(), pa.array(range(5))]
    empty = pa.RecordBatch.from_arrays([a.slice(0, 0) for a in arrays], names=["d", "s", "i"])
    upload(server.url, "unions.arrow", pa.Table.from_batches([empty]), batches=[empty])
    for how, got in read_back(server, "unions.arrow", tmp_path).items():
        assert got.equals(pa.Table.from_batches([empty])), how


@pytest.mark.parametrize("compression", ["uncompressed", "lz4", "zstd"])
def test_files_pyarrow_wrote_are_served_as_they_lie(server, tmp_path, compression):
    """Without dictionaries, a data plane sends each batch's bytes from the file unread."""
    t = every_type().drop_columns(["dictionary", "nested_dictionary"])
    name = f"as_written_{compression}.arrow"
    feather.write_feather(t, server.dir / name, compression=compression, chunksize=2)
    for how, got in read_back(server, name, tmp_path).items():
        assert got.schema.equals(t.schema, check_metadata=True), how
        assert got.equals(t), how
