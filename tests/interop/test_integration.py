"""Arrow's own Flight integration suite against `wirespeed serve`: the default scenario of
arrow-go's `arrow-flight-integration-client`, over files of every type arrow-testing's gold
files cover. arrow-testing is no registry package, so its equivalents are made here: tables
written with pyarrow, turned into the suite's JSON by arrow-go's `arrow-json-integration-test`.

The scenario uploads each file's batches (each acknowledged with its app_metadata), asks for
the FlightInfo, and connects to `endpoint.location[0]`, as Arrow's example clients do. Since
it ignores a failed read at that location, the test reads there too, with pyarrow."""
import datetime
import decimal
import os
import subprocess
import uuid

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.flight as flight
import pytest

from conftest import ROOT, Proc, free_port

# The arrow-go release the Go Flight client (tests/interop/goflight) is built from.
ARROW_GO = "github.com/apache/arrow-go/v18"
ARROW_GO_VERSION = "v18.8.0"
TOOLS = {
    "arrow-flight-integration-client": "arrow/internal/flight_integration/cmd/arrow-flight-integration-client",
    "arrow-json-integration-test": "arrow/ipc/cmd/arrow-json-integration-test",
}


@pytest.fixture(scope="module")
def go_tools():
    """Both programs, `go install`ed by name into target/go-bin."""
    out = ROOT / "target" / "go-bin"
    for tool, path in TOOLS.items():
        if not (out / tool).exists():
            subprocess.run(["go", "install", f"{ARROW_GO}/{path}@{ARROW_GO_VERSION}"], check=True, timeout=900,
                           env={**os.environ, "GOBIN": str(out), "CGO_ENABLED": "0"})
    return out


def batches(schema, columns, chunks=3):
    """A table of `columns` cut into `chunks` batches (the suite's files have several)."""
    table = pa.table(columns, schema=schema)
    rows = table.num_rows
    size = max(1, -(-rows // chunks))
    return pa.Table.from_batches(table.to_batches(max_chunksize=size), schema)


def gold_tables():
    """Tables standing for arrow-testing's integration gold files, by the same names."""
    n = 37
    nulls = [None if i % 5 == 0 else i for i in range(n)]

    def col(values, t):
        return pa.array(values, t)

    ints = {f"{s}int{w}": col([None if i % 5 == 0 else (i % 100 if s else i - 18) for i in range(n)],
                              getattr(pa, f"{s}int{w}")())
            for s in ("", "u") for w in (8, 16, 32, 64)}
    text = [None if i % 7 == 0 else f"s{i}" * (i % 4) for i in range(n)]
    primitive = {
        "bool": col([None if i % 6 == 0 else i % 2 == 0 for i in range(n)], pa.bool_()),
        **ints,
        "float32": col([None if v is None else v / 3 for v in nulls], pa.float32()),
        "float64": col([None if v is None else v / 7 for v in nulls], pa.float64()),
        "binary": col([None if t is None else t.encode() for t in text], pa.binary()),
        "utf8": col(text, pa.string()),
        "large_binary": col([None if t is None else t.encode() for t in text], pa.large_binary()),
        "large_utf8": col(text, pa.large_string()),
        "fixed_size_binary": col([None if i % 4 == 0 else bytes([i] * 3) for i in range(n)], pa.binary(3)),
    }
    tables = {"generated_primitive": batches(None, primitive)}
    tables["generated_primitive_zerolength"] = pa.Table.from_batches(
        [pa.record_batch({k: v.slice(0, 0) for k, v in primitive.items()})] * 2)
    tables["generated_primitive_no_batches"] = pa.Table.from_batches([], pa.schema([("i", pa.int32())]))
    tables["generated_null"] = batches(None, {"n": pa.nulls(n), "m": pa.nulls(n)})
    tables["generated_decimal"] = batches(None, {
        "d": col([None if v is None else decimal.Decimal(v) / 100 for v in nulls], pa.decimal128(10, 2))})
    # Without nulls, and decimal32 without a scale: arrow-go 18.8's JSON writer gives a null
    # decimal32 or decimal64 a value ("(null)"), and a decimal32 a decimal point, that its own
    # JSON reader cannot read back.
    tables["generated_decimal32"] = batches(None, {
        "d": col([decimal.Decimal(i) * 7 for i in range(n)], pa.decimal32(9, 0))})
    tables["generated_decimal64"] = batches(None, {
        "d": col([decimal.Decimal(i) * 1000 for i in range(n)], pa.decimal64(15, 0))})
    tables["generated_decimal256"] = batches(None, {
        "d": col([None if v is None else decimal.Decimal(v) ** 9 for v in nulls], pa.decimal256(70, 0))})
    day, moment = datetime.date(2024, 2, 29), datetime.datetime(2024, 2, 29, 12, 30, 15, 123456)
    tables["generated_datetime"] = batches(None, {
        "date32": col([None if v is None else day + datetime.timedelta(days=v) for v in nulls], pa.date32()),
        "date64": col([None if v is None else day - datetime.timedelta(days=v) for v in nulls], pa.date64()),
        "time32s": col(nulls, pa.time32("s")),
        "time32ms": col(nulls, pa.time32("ms")),
        "time64us": col(nulls, pa.time64("us")),
        "time64ns": col(nulls, pa.time64("ns")),
        **{f"ts_{u}": col([None if v is None else moment + datetime.timedelta(hours=v) for v in nulls],
                          pa.timestamp(u)) for u in ("s", "ms", "us", "ns")},
        "ts_tz": col([None if v is None else moment for v in nulls], pa.timestamp("us", tz="Europe/Berlin")),
    })
    tables["generated_duration"] = batches(None, {f"d_{u}": col(nulls, pa.duration(u)) for u in ("s", "ms", "us", "ns")})
    tables["generated_interval"] = batches(None, {
        "mdn": col([None if v is None else pa.MonthDayNano([v, -v, v * 1000]) for v in nulls],
                   pa.month_day_nano_interval())})
    tables["generated_map"] = batches(None, {
        "m": col([None if i % 6 == 0 else [(f"k{j}", j) for j in range(i % 3)] for i in range(n)],
                 pa.map_(pa.string(), pa.int64()))})
    tables["generated_nested"] = batches(None, {
        "list": col([None if i % 5 == 0 else list(range(i % 4)) for i in range(n)], pa.list_(pa.int32())),
        "large_list": col([None if i % 6 == 0 else [f"v{i}"] * (i % 3) for i in range(n)],
                          pa.large_list(pa.string())),
        "fixed_list": col([None if i % 4 == 0 else [i, None] for i in range(n)], pa.list_(pa.int16(), 2)),
        "struct": col([None if i % 7 == 0 else {"a": i, "b": f"b{i}"} for i in range(n)],
                      pa.struct([("a", pa.int64()), ("b", pa.string())])),
    })
    tables["generated_nested_large_offsets"] = batches(None, {
        "large_list": col([None if i % 5 == 0 else list(range(i % 4)) for i in range(n)], pa.large_list(pa.int64())),
        "large_list_view": col([None if i % 6 == 0 else [i] for i in range(n)], pa.large_list_view(pa.int32())),
    })
    tables["generated_null_trivial"] = pa.Table.from_batches([pa.record_batch({"n": pa.nulls(0)})])
    tables["generated_recursive_nested"] = batches(None, {
        "r": col([None if i % 5 == 0 else [{"xs": [i, i + 1]}, {"xs": None}] for i in range(n)],
                 pa.list_(pa.struct([("xs", pa.list_(pa.int32()))])))})
    sparse_types = pa.array([i % 2 for i in range(n)], pa.int8())
    tables["generated_union"] = batches(None, {
        "sparse": pa.UnionArray.from_sparse(sparse_types, [pa.array(range(n), pa.int32()),
                                                           pa.array([f"u{i}" for i in range(n)])]),
        "dense": pa.UnionArray.from_dense(sparse_types, pa.array([i // 2 for i in range(n)], pa.int32()),
                                          [pa.array(range(n), pa.int64()), pa.array([i / 2 for i in range(n)])]),
    })
    words = pa.array([None if i % 6 == 0 else ["red", "green", "blue"][i % 3] for i in range(n)])
    tables["generated_dictionary"] = batches(None, {
        "d8": words.dictionary_encode().cast(pa.dictionary(pa.int8(), pa.string())),
        "d32": pa.array([i % 4 for i in range(n)]).dictionary_encode(),
    })
    tables["generated_dictionary_unsigned"] = batches(None, {
        "u8": words.dictionary_encode().cast(pa.dictionary(pa.uint8(), pa.string())),
        "u32": words.dictionary_encode().cast(pa.dictionary(pa.uint32(), pa.string())),
    })
    tables["generated_nested_dictionary"] = batches(None, {
        "ld": pa.ListArray.from_arrays(pa.array(range(0, n + 1, 1), pa.int32()), words.dictionary_encode())})
    tables["generated_extension"] = batches(None, {
        "uuid": pa.ExtensionArray.from_storage(
            pa.uuid(), pa.array([None if i % 5 == 0 else uuid.UUID(int=i).bytes for i in range(n)], pa.binary(16)))})
    tables["generated_custom_metadata"] = batches(
        pa.schema([pa.field("x", pa.int64(), metadata={"field": "meta"})], metadata={"schema": "meta", "k": "v"}),
        {"x": col(nulls, pa.int64())})
    tables["generated_duplicate_fieldnames"] = batches(None, {
        "s": pa.StructArray.from_arrays([pa.array(range(n)), pa.array(range(n))], names=["dup", "dup"])})
    tables["generated_binary_view"] = batches(None, {
        "bv": col([None if t is None else (t * 5).encode() for t in text], pa.binary_view()),
        "sv": col([None if t is None else t * 5 for t in text], pa.string_view()),
    })
    tables["generated_run_end_encoded"] = batches(None, {
        "ree": pa.RunEndEncodedArray.from_arrays(pa.array([3, 10, 20, n], pa.int32()),
                                                 pa.array([1, None, 3, 4], pa.int64()))})
    tables["generated_list_view"] = batches(None, {
        "lv": col([None if i % 5 == 0 else list(range(i % 3)) for i in range(n)], pa.list_view(pa.int32()))})
    return tables


TABLES = gold_tables()


@pytest.fixture(scope="module")
def jsons(go_tools, tmp_path_factory):
    """Each table as the suite's JSON, named `<name>.arrow` so that its upload lands as an Arrow
    file (the scenario names the flight by the JSON file's path)."""
    work = tmp_path_factory.mktemp("integration")
    for name, table in TABLES.items():
        feather.write_feather(table, work / f"{name}.gold", compression="uncompressed")
        subprocess.run([str(go_tools / "arrow-json-integration-test"), "-mode", "ARROW_TO_JSON", "-verbose=false",
                        "-arrow", str(work / f"{name}.gold"), "-json", str(work / f"{name}.arrow")],
                       check=True, capture_output=True, timeout=60)
    return work


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("served")
    port = free_port()
    proc = Proc(["serve", str(data), "--listen", f"0.0.0.0:{port}"])
    proc.port, proc.dir = port, data
    yield proc
    proc.stop()


@pytest.mark.parametrize("name", sorted(TABLES))
def test_the_default_scenario_passes(go_tools, jsons, server, name):
    r = subprocess.run([str(go_tools / "arrow-flight-integration-client"), "-host", "127.0.0.1",
                        "-port", str(server.port), "-path", f"{name}.arrow"],
                       cwd=jsons, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    expected = feather.read_table(jsons / f"{name}.gold")
    assert feather.read_table(server.dir / f"{name}.arrow").equals(expected, check_metadata=True)
    # Where the scenario reads it back: the server as this client reached it.
    client = flight.connect(f"grpc://127.0.0.1:{server.port}")
    info = client.get_flight_info(flight.FlightDescriptor.for_path(f"{name}.arrow"))
    [endpoint] = info.endpoints
    assert [loc.uri.decode() for loc in endpoint.locations] == [f"grpc+tcp://127.0.0.1:{server.port}"]
    got = flight.connect(endpoint.locations[0]).do_get(endpoint.ticket).read_all()
    assert got.equals(expected, check_metadata=True)


def test_the_location_names_the_server_as_each_client_reached_it(server):
    """Reached as localhost or as 127.0.0.1 (a server on 0.0.0.0 has no one name), each client
    is told the name it used; one that asked for a name gets it."""
    for host in ("localhost", "127.0.0.1"):
        info = next(flight.connect(f"grpc://{host}:{server.port}").list_flights(), None)
        if info is not None:
            assert info.endpoints[0].locations[0].uri.decode() == f"grpc+tcp://{host}:{server.port}"
    data = server.dir
    feather.write_feather(pa.table({"x": [1]}), data / "one.arrow")
    port = free_port()
    advertised = Proc(["serve", str(data), "--listen", f"127.0.0.1:{port}", "--advertise",
                       "grpc+tls://flight.example.org:443"])
    try:
        info = flight.connect(f"grpc://127.0.0.1:{port}").get_flight_info(flight.FlightDescriptor.for_path("one.arrow"))
        assert [loc.uri.decode() for loc in info.endpoints[0].locations] == ["grpc+tls://flight.example.org:443"]
    finally:
        advertised.stop()
