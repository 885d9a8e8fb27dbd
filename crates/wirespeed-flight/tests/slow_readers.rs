//! Readers that pause, from several client addresses, against the one bound on the response
//! bytes the server holds: past it, the reader that has waited longest is cancelled with
//! RESOURCE_EXHAUSTED, and every other reader gets all its data.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, RecordBatch, UInt8Array};
use arrow_flight::{FlightDescriptor, FlightInfo, Ticket};
use arrow_schema::{DataType, Field, Schema};
use prost::Message;
use wirespeed_flight::{Error, Handler, Limits, Output, Result, Server};

const BATCHES: usize = 40;
const BATCH_BYTES: usize = 1 << 20;

/// Every ticket is [`BATCHES`] batches of [`BATCH_BYTES`].
struct Megabytes;

impl Handler for Megabytes {
    fn get_flight_info(&self, _descriptor: &FlightDescriptor) -> Result<FlightInfo> {
        Err(Error::not_found("no flights here"))
    }

    fn do_get(&self, _ticket: &[u8]) -> Result<Output> {
        let schema = Arc::new(Schema::new(vec![Field::new("b", DataType::UInt8, false)]));
        let column: ArrayRef = Arc::new(UInt8Array::from(vec![7u8; BATCH_BYTES]));
        let batch = RecordBatch::try_new(schema.clone(), vec![column]).map_err(|e| Error::internal(e.to_string()))?;
        Ok(Output::batches(schema, (0..BATCHES).map(move |_| batch.clone())))
    }
}

/// A DoGet from `from`, over a connection whose windows hold 64 KiB: once those are full and
/// nobody reads, the server holds the rest.
async fn paused_get(server: SocketAddr, from: &str) -> h2::RecvStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let stream = socket.connect(server).await.unwrap();
    // Without it, each 64 KiB window waits on a delayed ACK once the reader reads.
    stream.set_nodelay(true).unwrap();
    let (client, connection) = h2::client::handshake(stream).await.unwrap();
    tokio::spawn(connection);
    let request = http::Request::post("/arrow.flight.protocol.FlightService/DoGet")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (response, mut body) = client.ready().await.unwrap().send_request(request, false).unwrap();
    let ticket = Ticket { ticket: b"any".to_vec().into() }.encode_to_vec();
    let mut message = vec![0u8];
    message.extend_from_slice(&(ticket.len() as u32).to_be_bytes());
    message.extend_from_slice(&ticket);
    body.send_data(message.into(), true).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(20), response).await.expect("no answer").unwrap();
    assert_eq!(response.status(), 200);
    response.into_body()
}

/// Reads the rest of a call: the bytes that came and its gRPC status.
async fn read_to_end(mut body: h2::RecvStream) -> (usize, String) {
    let mut bytes = 0;
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(20), body.data()).await.expect("stalled") {
        let chunk = chunk.unwrap();
        bytes += chunk.len();
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    let trailers = body.trailers().await.unwrap().expect("no trailers");
    (bytes, trailers["grpc-status"].to_str().unwrap().to_string())
}

fn scrape(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text
}

fn figure(metrics: &str, series: &str) -> f64 {
    let line = metrics.lines().find(|l| l.starts_with(series)).unwrap_or_else(|| panic!("no {series}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn past_the_bound_the_reader_that_waited_longest_is_cancelled_and_the_others_get_everything() {
    // Each paused reader leaves about 6 MiB held (a queue of 4 messages and the 2 gRPC took).
    let limits = Limits { response_bytes: 28 << 20, ..Limits::default() };
    let server = Server::builder(Megabytes).limits(limits).metrics("127.0.0.1:0").start().unwrap();
    let (addr, metrics) = (server.addr().unwrap(), server.metrics_addr().unwrap());
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let cut = runtime.block_on(async {
        // Paused readers from one address after another, each leaving 5 to 6 MiB held (how
        // many messages hyper has taken varies), until one passes the bound: four cannot.
        let cancelled = "wirespeed_flight_refused_calls_total{reason=\"response_bytes\"}";
        let mut paused = Vec::new();
        for last in 2..=12 {
            paused.push(paused_get(addr, &format!("127.0.0.{last}")).await);
            tokio::time::sleep(Duration::from_millis(300)).await;
            let text = scrape(metrics);
            let held = figure(&text, "wirespeed_flight_response_held_bytes");
            assert!(held <= (28 << 20) as f64, "{held} bytes held");
            if text.contains(cancelled) {
                break;
            }
        }
        assert!(paused.len() > 4, "cancelled with {} readers, under the bound", paused.len());
        // A cancelled call's last two messages stay with hyper until its reader reads, so the
        // newest reader may go on to cancel the next longest waiting too.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let text = scrape(metrics);
        let cut = figure(&text, cancelled) as usize;
        assert!(cut >= 1 && cut < paused.len(), "{cut} of {} cancelled", paused.len());
        assert!(figure(&text, "wirespeed_flight_response_held_bytes") <= (28 << 20) as f64);

        for (i, body) in paused.into_iter().enumerate() {
            let (bytes, status) = read_to_end(body).await;
            if i < cut {
                assert_eq!(status, "8", "RESOURCE_EXHAUSTED for reader {}, among the longest waiting", i + 1);
                assert!(bytes < BATCHES * BATCH_BYTES);
            } else {
                assert_eq!(status, "0", "reader {} was cut short", i + 1);
                assert!(bytes > BATCHES * BATCH_BYTES, "reader {} got {bytes} bytes", i + 1);
            }
        }
        cut
    });
    let text = scrape(metrics);
    assert_eq!(figure(&text, "wirespeed_flight_response_held_bytes"), 0.0);
    assert_eq!(figure(&text, "wirespeed_flight_refused_calls_total{reason=\"response_bytes\"}"), cut as f64);
}
