//! The client and server over every plane: gRPC, shm, tcp and ucx, with real sockets, shared
//! memory and UCX. Each plane must give the same results, errors and cancellations.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, DictionaryArray, Int64Array, RecordBatch, StringArray};
use arrow_flight::{FlightDescriptor, FlightEndpoint, FlightInfo, Location, Ticket};
use arrow_schema::SchemaRef;
use bytes::Bytes;
use wirespeed::{Key, Provider};
use wirespeed_flight::{
    Client, Code, Error, Fabric, Handler, Input, Method, Output, Payload, PlaneChoice, Result, Server, Upload,
};

type Flights = HashMap<String, (SchemaRef, Vec<RecordBatch>)>;

/// Flights kept in memory, keyed by path; "endless" streams batches until cancelled.
#[derive(Default, Clone)]
struct Memory {
    flights: Arc<Mutex<Flights>>,
    endless_pulls: Arc<AtomicUsize>,
}

impl Handler for Memory {
    fn list_flights(&self, _criteria: &[u8]) -> Result<Vec<FlightInfo>> {
        let names: Vec<String> = self.flights.lock().unwrap().keys().cloned().collect();
        names.iter().map(|n| self.get_flight_info(&FlightDescriptor::new_path(vec![n.clone()]))).collect()
    }

    fn get_flight_info(&self, descriptor: &FlightDescriptor) -> Result<FlightInfo> {
        let name = descriptor.path.join("/");
        let flights = self.flights.lock().unwrap();
        let (schema, batches) = flights.get(&name).ok_or_else(|| Error::not_found(format!("no flight {name}")))?;
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        Ok(FlightInfo::new()
            .try_with_schema(schema)?
            .with_descriptor(descriptor.clone())
            .with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(name.clone())))
            .with_total_records(rows as i64))
    }

    fn do_get(&self, ticket: &[u8]) -> Result<Output> {
        let name = String::from_utf8_lossy(ticket).into_owned();
        if name == "endless" {
            let pulls = self.endless_pulls.clone();
            let b = batch(0, 1024);
            return Ok(Output::new(
                b.schema(),
                std::iter::repeat_with(move || {
                    pulls.fetch_add(1, Ordering::SeqCst);
                    Ok(Payload::batch(b.clone()))
                }),
            ));
        }
        if name == "large" {
            // 160 MiB in 1 MiB batches: more than a shared-memory ring holds.
            let b = RecordBatch::try_from_iter([(
                "x",
                Arc::new(Int64Array::from_iter_values(0..LARGE_BATCH_ROWS)) as ArrayRef,
            )])
            .unwrap();
            return Ok(Output::new(b.schema(), (0..LARGE_BATCHES).map(move |_| Ok(Payload::batch(b.clone())))));
        }
        if name == "fails-midway" {
            let b = batch(0, 10);
            let items = vec![Ok(Payload::batch(b.clone())), Err(Error::internal("the disk fell off"))];
            return Ok(Output::new(b.schema(), items.into_iter()));
        }
        let flights = self.flights.lock().unwrap();
        let (schema, batches) = flights.get(&name).ok_or_else(|| Error::not_found(format!("no flight {name}")))?;
        let payloads: Vec<_> = batches
            .iter()
            .enumerate()
            .map(|(i, b)| Ok(Payload::new(Some(b.clone()), Bytes::from(format!("batch {i}")))))
            .collect();
        Ok(Output::new(schema.clone(), payloads.into_iter()))
    }

    fn do_put(&self, descriptor: &FlightDescriptor, schema: &SchemaRef) -> Result<Box<dyn Upload>> {
        let name = descriptor.path.join("/");
        Ok(Box::new(Stored { flights: self.flights.clone(), name, schema: schema.clone(), batches: Vec::new() }))
    }

    /// Echoes each batch back with its row count as metadata.
    fn do_exchange(&self, _descriptor: &FlightDescriptor, mut input: Input) -> Result<Output> {
        let schema = input.schema()?;
        Ok(Output::new(
            schema,
            input.map(|p| {
                let p = p?;
                let rows = p.record_batch().map_or(0, |b| b.num_rows());
                Ok(Payload::new(p.into_parts().0, Bytes::from(rows.to_string())))
            }),
        ))
    }
}

/// An upload into [`Memory`], stored when it finishes; metadata is echoed as it arrives.
struct Stored {
    flights: Arc<Mutex<Flights>>,
    name: String,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
}

impl Upload for Stored {
    fn write(&mut self, payload: Payload) -> Result<Option<Bytes>> {
        let (batch, app_metadata) = payload.into_parts();
        self.batches.extend(batch);
        Ok((!app_metadata.is_empty()).then_some(app_metadata))
    }

    fn finish(self: Box<Self>) -> Result<Vec<Bytes>> {
        let n = self.batches.len();
        self.flights.lock().unwrap().insert(self.name, (self.schema, self.batches));
        Ok(vec![Bytes::from(format!("stored {n}"))])
    }
}

const LARGE_BATCHES: usize = 160;
const LARGE_BATCH_ROWS: i64 = 1 << 17;

fn batch(start: i64, rows: i64) -> RecordBatch {
    let dict: DictionaryArray<Int32Type> = (0..rows).map(|i| ["red", "green", "blue"][(i % 3) as usize]).collect();
    RecordBatch::try_from_iter_with_nullable([
        ("a", Arc::new(Int64Array::from_iter_values(start..start + rows)) as ArrayRef, false),
        (
            "s",
            Arc::new(StringArray::from_iter((0..rows).map(|i| (i % 7 != 0).then(|| format!("row {}", start + i))))),
            true,
        ),
        ("d", Arc::new(dict), false),
    ])
    .unwrap()
}

fn key() -> Key {
    Key::new("flight test key").unwrap()
}

/// Every plane, libfabric's over the providers this host has (shm and tcp).
const FABRICS: [Fabric; 5] =
    [Fabric::Shm, Fabric::Ucx, Fabric::Ofi(Provider::Shm), Fabric::Ofi(Provider::Tcp), Fabric::Tcp];

fn server(memory: &Memory) -> Server {
    Server::builder(memory.clone()).key(key()).planes(&FABRICS).start().unwrap()
}

const PLANES: [PlaneChoice; 6] = [
    PlaneChoice::Grpc,
    PlaneChoice::Only(Fabric::Shm),
    PlaneChoice::Only(Fabric::Tcp),
    PlaneChoice::Only(Fabric::Ucx),
    PlaneChoice::Only(Fabric::Ofi(Provider::Shm)),
    PlaneChoice::Only(Fabric::Ofi(Provider::Tcp)),
];

fn client(server: &Server, transport: PlaneChoice) -> Client {
    Client::connect(&server.url()).unwrap().with_key(key()).with_transport(transport)
}

fn path(name: &str) -> FlightDescriptor {
    FlightDescriptor::new_path(vec![name.to_string()])
}

fn put(client: &Client, name: &str, batches: &[RecordBatch]) -> Vec<Bytes> {
    let mut w = client.do_put(&path(name), &batches[0].schema()).unwrap();
    for b in batches {
        w.write(b.clone()).unwrap();
    }
    w.finish().unwrap()
}

#[test]
fn put_then_get_on_every_plane() {
    let memory = Memory::default();
    let server = server(&memory);
    for transport in PLANES {
        let c = client(&server, transport);
        let name = format!("{transport:?}");
        let batches: Vec<_> = (0..5).map(|i| batch(i * 1000, 1000 + i)).collect();
        assert_eq!(put(&c, &name, &batches), vec![Bytes::from("stored 5")], "{name}");

        let info = c.get_flight_info(&path(&name)).unwrap();
        assert_eq!(info.total_records, 5010);
        assert!(info.endpoint[0].location.is_empty(), "an endpoint without locations stays without");
        let mut reader = c.do_get(&info.endpoint[0]).unwrap();
        let expected = match transport {
            PlaneChoice::Only(kind) => kind.name(),
            _ => "grpc",
        };
        assert_eq!(reader.plane().name(), expected);
        let mut got = Vec::new();
        while let Some(p) = reader.next_payload().unwrap() {
            assert_eq!(p.app_metadata(), &Bytes::from(format!("batch {}", got.len())), "app_metadata travels");
            got.push(p.into_parts().0.unwrap());
        }
        assert_eq!(got, batches, "{name}");
        if transport == PlaneChoice::Only(Fabric::Shm) {
            let column = got[0].column(0).to_data().buffers()[0].as_ptr();
            assert!(in_mapping(column, "memfd:wirespeed-shm"), "batches read over shm wrap the ring, not a copy");
        }
    }
}

/// Shared batches travel on every plane. Over shm the receiver's arrays lie in its own mapping
/// of the sender's sealed region: neither side copied them, and they hold no ring space.
#[test]
fn shared_batches_travel_by_reference_over_shm() {
    let memory = Memory::default();
    let server = server(&memory);
    for transport in PLANES {
        let c = client(&server, transport);
        let name = format!("shared {transport:?}");
        let batches: Vec<_> = (0..3).map(|i| wirespeed_flight::share(&batch(i * 1000, 1000)).unwrap()).collect();
        put(&c, &name, &batches);
        let stored = memory.flights.lock().unwrap()[&name].1.clone();
        assert_eq!(stored, batches, "{name}");
        let column = stored[0].column(0).to_data().buffers()[0].as_ptr();
        // The sender's own mapping is registered; the receiver's mapping of it is not.
        let by_reference =
            in_mapping(column, "memfd:wirespeed-sealed") && wirespeed::SealedRegion::containing(column, 1).is_none();
        assert_eq!(by_reference, transport == PlaneChoice::Only(Fabric::Shm), "{name}");
    }
}

/// True if `ptr` lies in a mapping of the memfd called `name` in this process.
fn in_mapping(ptr: *const u8, name: &str) -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines().filter(|l| l.contains(name)).any(|l| {
        let (lo, hi) = l.split_whitespace().next().unwrap().split_once('-').unwrap();
        let (lo, hi) = (usize::from_str_radix(lo, 16).unwrap(), usize::from_str_radix(hi, 16).unwrap());
        (lo..hi).contains(&(ptr as usize))
    })
}

#[test]
fn auto_prefers_shared_memory_on_one_host_and_grpc_without_a_key() {
    let memory = Memory::default();
    let server = server(&memory);
    let c = Client::connect(&server.url()).unwrap().with_key(key());
    put(&c, "x", &[batch(0, 10)]);
    let info = c.get_flight_info(&path("x")).unwrap();
    assert_eq!(c.do_get(&info.endpoint[0]).unwrap().plane().name(), "shm");

    // Keyless whatever the environment holds: only with_key_from_env reads WIRESPEED_KEY.
    let keyless = Client::connect(&server.url()).unwrap();
    let r = keyless.do_get(&info.endpoint[0]).unwrap();
    assert_eq!(r.plane().name(), "grpc");
    assert_eq!(r.map(|b| b.unwrap().num_rows()).sum::<usize>(), 10);
}

/// A server on a Unix socket (`grpc+unix://`, as pyarrow names one): gRPC over the socket,
/// the data planes on loopback beside it. A live socket is never taken over, and the file
/// goes with the server.
#[test]
fn a_unix_socket_serves_grpc_and_planes_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("flight.sock");
    let url = format!("grpc+unix://{}", socket.display());
    let memory = Memory::default();
    let planes = [Fabric::Shm, Fabric::Tcp];
    let server = Server::builder(memory.clone()).listen(&url).key(key()).planes(&planes).start().unwrap();
    assert_eq!((server.url(), server.addr()), (url.clone(), None));
    assert!(Server::builder(memory).listen(&url).start().is_err(), "a live socket is not taken over");
    for transport in [PlaneChoice::Grpc, PlaneChoice::Only(Fabric::Shm), PlaneChoice::Only(Fabric::Tcp)] {
        let c = client(&server, transport);
        let name = format!("unix {transport:?}");
        put(&c, &name, &[batch(0, 100)]);
        let info = c.get_flight_info(&path(&name)).unwrap();
        let reader = c.do_get(&info.endpoint[0]).unwrap();
        let expected = match transport {
            PlaneChoice::Only(kind) => kind.name(),
            _ => "grpc",
        };
        assert_eq!(reader.plane().name(), expected);
        assert_eq!(reader.map(|b| b.unwrap().num_rows()).sum::<usize>(), 100, "{name}");
    }
    drop(server);
    assert!(!socket.exists(), "the socket's file goes with the server");
}

#[test]
fn exchange_streams_both_ways_on_every_plane() {
    let memory = Memory::default();
    let server = server(&memory);
    for transport in PLANES {
        let c = client(&server, transport);
        let schema = batch(0, 1).schema();
        let (mut w, mut r) = c.do_exchange(&path("echo"), &schema).unwrap();
        for i in 0..20 {
            let b = batch(i * 10, 10 + i);
            w.write(b.clone()).unwrap();
            let p = r.next_payload().unwrap().unwrap();
            assert_eq!(p.app_metadata(), &Bytes::from((10 + i).to_string()));
            assert_eq!(p.into_parts().0.unwrap(), b, "{transport:?}");
        }
        w.finish().unwrap();
        assert!(r.next_payload().unwrap().is_none(), "{transport:?}: the echo ends when the input does");
    }
}

#[test]
fn errors_keep_their_flight_codes_on_every_plane() {
    let memory = Memory::default();
    let server = server(&memory);
    for transport in PLANES {
        let c = client(&server, transport);
        assert_eq!(c.get_flight_info(&path("missing")).unwrap_err().code(), Code::NotFound);
        let endpoint = |t: &str| FlightEndpoint::new().with_ticket(Ticket::new(t.to_string()));
        // A ticket for nothing, over gRPC or a data plane: NotFound both ways. Data planes
        // need a capability for it, which only get_flight_info grants; fake the endpoint over
        // gRPC and take the error from there.
        let err =
            Client::connect(&server.url()).unwrap().with_transport(PlaneChoice::Grpc).do_get(&endpoint("missing"));
        assert_eq!(err.err().unwrap().code(), Code::NotFound);

        put(&c, "fails-midway", &[batch(0, 1)]);
        let info = c.get_flight_info(&path("fails-midway")).unwrap();
        let reader = c.do_get(&info.endpoint[0]).unwrap();
        let results: Vec<_> = reader.collect();
        assert!(results[0].is_ok(), "{transport:?}: the first batch arrives");
        let err = results.last().unwrap().as_ref().unwrap_err();
        assert_eq!(err.code(), Code::Internal, "{transport:?}: {err}");
        assert!(err.to_string().contains("the disk fell off"), "{err}");
    }
}

#[test]
fn forged_and_altered_capabilities_get_no_data() {
    let memory = Memory::default();
    let server = server(&memory);
    let c = client(&server, PlaneChoice::Only(Fabric::Tcp));
    put(&c, "secret", &[batch(0, 100)]);
    put(&c, "public", &[batch(0, 100)]);
    let offered = |c: &Client| {
        let uris = c.plane_locations(Method::Get, b"public").unwrap();
        let location = uris.into_iter().map(|uri| Location { uri }).collect();
        FlightEndpoint { ticket: Some(Ticket::new("public")), location, ..Default::default() }
    };
    let info = FlightInfo::new().with_endpoint(offered(&c));

    // The capability for "public" presented with the ticket for "secret".
    let mut forged = info.endpoint[0].clone();
    forged.ticket = Some(Ticket::new("secret"));
    let err = c.do_get(&forged).err().unwrap();
    assert_eq!(err.code(), Code::Unauthenticated, "{err}");

    // A capability with one digit changed.
    let mut altered = info.endpoint[0].clone();
    for loc in &mut altered.location {
        if let Some(i) = loc.uri.find("cap=") {
            let digit = if &loc.uri[i + 4..i + 5] == "0" { "1" } else { "0" };
            loc.uri.replace_range(i + 4..i + 5, digit);
        }
    }
    assert_eq!(c.do_get(&altered).err().unwrap().code(), Code::Unauthenticated);

    // A capability from a server that has since restarted is stale.
    drop(server);
    let server = self::server(&memory);
    let c = client(&server, PlaneChoice::Only(Fabric::Tcp));
    let mut stale = info.endpoint[0].clone();
    let fresh = offered(&c);
    // Point the stale capability at the new server's tcp plane.
    let new_tcp = fresh.location.iter().find(|l| l.uri.starts_with("wirespeed+tcp")).unwrap().uri.clone();
    for loc in &mut stale.location {
        if loc.uri.starts_with("wirespeed+tcp") {
            let query = loc.uri.split_once('?').unwrap().1.to_string();
            loc.uri = format!("{}?{query}", new_tcp.split_once('?').unwrap().0);
        }
    }
    assert_eq!(c.do_get(&stale).err().unwrap().code(), Code::Unauthenticated);
    // The server still serves the honest call.
    assert_eq!(c.do_get(&fresh).unwrap().map(|b| b.unwrap().num_rows()).sum::<usize>(), 100);
}

#[test]
fn a_wrong_data_plane_key_is_refused() {
    let memory = Memory::default();
    let server = server(&memory);
    put(&client(&server, PlaneChoice::Grpc), "x", &[batch(0, 10)]);
    let wrong = Client::connect(&server.url())
        .unwrap()
        .with_key(Key::new("another key").unwrap())
        .with_transport(PlaneChoice::Only(Fabric::Tcp));
    let info = wrong.get_flight_info(&path("x")).unwrap();
    // Its hello does not verify, so the server names no planes to it.
    let err = wrong.do_get(&info.endpoint[0]).err().unwrap();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    assert!(err.to_string().contains("offers no tcp"), "{err}");
    // With Auto, it reads over gRPC.
    let auto = Client::connect(&server.url()).unwrap().with_key(Key::new("another key").unwrap());
    assert_eq!(auto.do_get(&info.endpoint[0]).unwrap().plane().name(), "grpc");
}

#[test]
fn a_client_that_drops_a_stream_cancels_it_on_the_server() {
    let memory = Memory::default();
    let server = server(&memory);
    for transport in PLANES {
        memory.endless_pulls.store(0, Ordering::SeqCst);
        let c = client(&server, transport);
        let endpoint = FlightEndpoint::new().with_ticket(Ticket::new("endless"));
        // Data planes need a granted location: take one from a flight's info and swap tickets
        // is forbidden, so use gRPC's endpoint-less form only for gRPC.
        let mut reader = match transport {
            PlaneChoice::Grpc => c.do_get(&endpoint).unwrap(),
            _ => {
                memory.flights.lock().unwrap().insert("endless".into(), (batch(0, 1).schema(), vec![]));
                let info = c.get_flight_info(&path("endless")).unwrap();
                c.do_get(&info.endpoint[0]).unwrap()
            }
        };
        for _ in 0..10 {
            reader.next().unwrap().unwrap();
        }
        drop(reader);
        let settled = wait_until_steady(&memory.endless_pulls);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(memory.endless_pulls.load(Ordering::SeqCst), settled, "{transport:?}: the server stopped producing");
    }
}

/// Waits until a counter stops moving (bounded), returning its value.
fn wait_until_steady(counter: &AtomicUsize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = counter.load(Ordering::SeqCst);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        let now = counter.load(Ordering::SeqCst);
        if now == last {
            return now;
        }
        last = now;
    }
    panic!("the server kept producing for 20 s after the client left");
}

#[test]
fn many_concurrent_gets_and_puts_on_every_plane() {
    let memory = Memory::default();
    let server = server(&memory);
    std::thread::scope(|s| {
        for transport in PLANES {
            for t in 0..4 {
                let server = &server;
                s.spawn(move || {
                    let c = client(server, transport);
                    let name = format!("{transport:?}-{t}");
                    let batches: Vec<_> = (0..8).map(|i| batch(i * 100 + t, 3000)).collect();
                    put(&c, &name, &batches);
                    for _ in 0..3 {
                        let info = c.get_flight_info(&path(&name)).unwrap();
                        let reader = c.do_get(&info.endpoint[0]).unwrap_or_else(|e| panic!("{name}: {e:?}"));
                        let got: Vec<_> = reader.map(|b| b.expect(&name)).collect();
                        assert_eq!(got, batches, "{name}");
                    }
                });
            }
        }
    });
}

#[test]
fn a_password_protects_the_control_plane() {
    let memory = Memory::default();
    let server = Server::builder(memory.clone())
        .key(key())
        .password("hunter2".into())
        .password_over_plaintext()
        .start()
        .unwrap();
    let mut c = client(&server, PlaneChoice::Auto);
    assert_eq!(c.list_flights(b"").unwrap_err().code(), Code::Unauthenticated);
    assert_eq!(c.authenticate("me", "wrong").unwrap_err().code(), Code::Unauthenticated);
    c.authenticate("me", "hunter2").unwrap();
    put(&c, "x", &[batch(0, 5)]);
    assert_eq!(c.list_flights(b"").unwrap().len(), 1);
}

/// A client may keep every batch of a stream larger than the transport's buffers (as
/// `read_all` does): batches that wrap transport memory must not stall the stream.
#[test]
fn a_client_may_hold_every_batch_of_a_large_stream() {
    let memory = Memory::default();
    let server = server(&memory);
    memory.flights.lock().unwrap().insert("large".into(), (batch(0, 1).schema(), vec![]));
    for plane in PLANES {
        let c = client(&server, plane);
        let info = c.get_flight_info(&path("large")).unwrap();
        let held: Vec<RecordBatch> = c.do_get(&info.endpoint[0]).unwrap().collect::<Result<_>>().unwrap();
        assert_eq!(held.len(), LARGE_BATCHES, "{plane:?}");
        assert!(held.iter().all(|b| b.column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(5) == 5));
    }
}

/// A consumer may stop reading for longer than any transport wait, as gRPC allows: the server
/// waits for it rather than failing the call (before, a data-plane call failed after 30 s).
#[test]
fn a_consumer_may_pause_longer_than_a_transport_wait() {
    let memory = Memory::default();
    let server = server(&memory);
    memory.flights.lock().unwrap().insert("large".into(), (batch(0, 1).schema(), vec![]));
    let pause = wirespeed::Config::default().timeout + Duration::from_secs(2);
    std::thread::scope(|s| {
        for plane in PLANES {
            let c = client(&server, plane);
            s.spawn(move || {
                let info = c.get_flight_info(&path("large")).unwrap();
                let mut reader = c.do_get(&info.endpoint[0]).unwrap();
                assert!(reader.next_payload().unwrap().is_some());
                std::thread::sleep(pause);
                let mut got = 1;
                while reader.next_payload().unwrap().is_some() {
                    got += 1;
                }
                assert_eq!(got, LARGE_BATCHES, "{plane:?}");
            });
        }
    });
}
