//! Serving calls on data-plane listeners: a thread per connection accepts streams, a thread per
//! call runs the handler. A failing call answers with ERROR and ends; others go on.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use arrow_flight::FlightDescriptor;
use prost::Message as _;
use wirespeed::{Connection, ErrorCode, Listener};

use super::{CallStream, Side};

use super::capability::{Grant, Minter};
use super::proto::{Method, Msg};
use super::{Reader, close, send_error, send_output};
use crate::error::{Error, Result, Violation};
use crate::handler::{Handler, Input, Intake, PlaneCall};
use crate::ipc::DecodedStream;
use crate::telemetry::metrics::Refusal;
use crate::telemetry::{CallObserver, Telemetry};
use tonic::Code;
use wirespeed::Fabric;

/// How long a call waits for its client to end the stream after the answer.
const LINGER: Duration = Duration::from_secs(10);
/// How often the accept loops look at the stop flag.
const POLL: Duration = Duration::from_millis(200);

pub(crate) struct Shared {
    pub handler: Arc<dyn Handler>,
    pub minter: Minter,
    pub stop: AtomicBool,
    /// Set once the server drains: new calls are refused, those open go on.
    pub draining: AtomicBool,
    /// Calls on every plane, gRPC included.
    pub calls: Arc<Calls>,
    pub telemetry: Arc<Telemetry>,
}

impl Shared {
    pub(crate) fn new(handler: Arc<dyn Handler>, observer: Option<CallObserver>) -> Result<Arc<Self>> {
        Ok(Arc::new(Shared {
            telemetry: Telemetry::new(handler.clone(), observer),
            handler,
            minter: Minter::new()?,
            stop: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            calls: Arc::default(),
        }))
    }
}

/// How many calls are open, and how many ever started.
#[derive(Default)]
pub struct Calls {
    pub(crate) open: AtomicUsize,
    pub(crate) started: AtomicUsize,
}

impl Calls {
    /// Calls open now, on every plane and gRPC.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Calls ever started.
    pub fn started(&self) -> usize {
        self.started.load(Ordering::Relaxed)
    }
}

/// Counts a call as open while it lives.
pub(crate) struct OpenCall(Arc<Shared>);

impl OpenCall {
    pub(crate) fn new(shared: &Arc<Shared>) -> Self {
        shared.calls.open.fetch_add(1, Ordering::Relaxed);
        shared.calls.started.fetch_add(1, Ordering::Relaxed);
        OpenCall(shared.clone())
    }
}

impl Drop for OpenCall {
    fn drop(&mut self) {
        self.0.calls.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Accepts connections until `shared.stop` is set, their calls sealed when `sealed`. Failed
/// handshakes are dropped quietly.
pub(crate) fn accept_loop(listener: Listener, shared: Arc<Shared>, plane: Fabric, sealed: bool) {
    while !shared.stop.load(Ordering::Relaxed) {
        match listener.accept_timeout(POLL) {
            Ok(conn) => {
                let shared = shared.clone();
                std::thread::spawn(move || serve_connection(conn, shared, plane, sealed));
            }
            Err(wirespeed::Error::Timeout(_)) => continue,
            Err(wirespeed::Error::Rejected { .. }) => {
                shared.telemetry.metrics.refused_connection(Refusal::PlaneHandshake);
                continue;
            }
            Err(_) => break,
        }
    }
}

fn serve_connection(conn: Connection, shared: Arc<Shared>, plane: Fabric, sealed: bool) {
    let _open = shared.telemetry.metrics.connection(plane.name());
    while !shared.stop.load(Ordering::Relaxed) {
        match conn.accept_stream_timeout(POLL) {
            Ok(stream) => {
                let stream = CallStream::new(stream, &conn, Side::Server, sealed);
                let open = OpenCall::new(&shared);
                let shared = shared.clone();
                let call = PlaneCallInfo { plane: plane.name(), peer: conn.peer().to_string() };
                std::thread::spawn(move || {
                    serve_call(stream, &shared, call);
                    drop(open);
                });
            }
            Err(wirespeed::Error::Timeout(_)) => continue,
            Err(_) => break,
        }
    }
    conn.close();
}

/// Where a data-plane call came from, for its record.
struct PlaneCallInfo {
    plane: &'static str,
    peer: String,
}

fn serve_call(stream: CallStream, shared: &Shared, call: PlaneCallInfo) {
    let stream = Arc::new(stream);
    let ran = run_call(&stream, shared, call);
    let record = stream.record();
    if let Some(record) = &record {
        match &ran {
            Ok(()) => record.ended(Code::Ok, ""),
            Err(e) => record.ended(e.code(), &e.message()),
        }
    }
    let told = match ran {
        Ok(()) => return close(&stream, LINGER),
        // The stream is gone or stuck: nobody to tell.
        Err(Error::Connection(_)) => false,
        Err(e) => send_error(&stream, &e),
    };
    // A failed call ends at once: the reset stops a client still writing (its next write
    // fails, and it reads why), and what we sent before finishing stays readable. Never
    // finish a call the client was not told failed: it would take the output it has so far
    // for the whole of it.
    if told {
        let _ = stream.finish();
    }
    stream.reset(ErrorCode::CANCELLED);
}

fn run_call(stream: &Arc<CallStream>, shared: &Shared, call: PlaneCallInfo) -> Result<()> {
    let first = stream.recv()?.ok_or(Violation::EndedBeforeOpen)?;
    let Msg::Open { method, expiry, mac, target } = Msg::decode(&first.header)? else {
        return Err(Violation::OpenNotFirst.into());
    };
    let record = shared.telemetry.start(method.grpc_name(), call.plane, call.peer);
    record.received(first.header.len() as u64 + first.body.len());
    stream.keep_record(record.clone());
    if let Err(e) = shared.minter.check(method, &target, &Grant { expiry, mac }) {
        shared.telemetry.metrics.auth_failed("grant");
        return Err(e);
    }
    record.identify("key");
    if shared.draining.load(Ordering::Relaxed) {
        shared.telemetry.metrics.refused_call(Refusal::Draining);
        return Err(Error::unavailable("the server is shutting down: try again elsewhere or later"));
    }
    let watched = stream.clone();
    let for_call = shared.handler.for_call(&PlaneCall::new(mac, Arc::new(move || watched.is_reset())));
    let handler = for_call.as_deref().unwrap_or(&*shared.handler);
    match method {
        Method::Get => {
            let output = handler.do_get(&target)?;
            send_output(stream, output)
        }
        Method::Put => {
            let descriptor = descriptor(&target)?;
            let mut reader = Reader::new(stream.clone()).payloads();
            let mut upload = handler.do_put(&descriptor, &reader.schema()?)?;
            upload.reading(reader.stats());
            let result = |app_metadata| Msg::Data { app_metadata, meta: Default::default() }.encode();
            loop {
                match upload.intake(POLL) {
                    Intake::Done => break,
                    Intake::Later => continue,
                    Intake::Ready if !reader.wait_ready(POLL)? => continue,
                    Intake::Ready => {}
                }
                let Some(payload) = reader.next_payload()? else { break };
                if let Some(ack) = upload.write(payload)? {
                    stream.send(&result(ack), &[])?;
                }
            }
            for r in upload.finish()? {
                stream.send(&result(r), &[])?;
            }
            Ok(())
        }
        Method::Exchange => {
            let descriptor = descriptor(&target)?;
            let input = Input::new(Reader::new(stream.clone()).payloads());
            let output = handler.do_exchange(&descriptor, input)?;
            send_output(stream, output)
        }
    }
}

fn descriptor(target: &[u8]) -> Result<FlightDescriptor> {
    FlightDescriptor::decode(target).map_err(|e| Error::invalid_argument(format!("bad FlightDescriptor: {e}")))
}
