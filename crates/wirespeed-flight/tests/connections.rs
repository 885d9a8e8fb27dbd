//! The gRPC port's bounds, with raw sockets and a real client: sockets that never start HTTP/2
//! or stop half way are closed, idle connections are closed, and the service keeps answering.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use arrow_flight::{FlightDescriptor, FlightInfo};
use wirespeed_flight::{Client, Error, Handler, Input, Limits, Output, Result, Server};

struct Empty;

impl Handler for Empty {
    fn get_flight_info(&self, _descriptor: &FlightDescriptor) -> Result<FlightInfo> {
        Err(Error::not_found("nothing here"))
    }

    fn do_get(&self, _ticket: &[u8]) -> Result<Output> {
        Err(Error::not_found("nothing here"))
    }

    /// Answers only once its client has sent everything.
    fn do_exchange(&self, _descriptor: &FlightDescriptor, mut input: Input) -> Result<Output> {
        let schema = input.schema()?;
        let everything = input.collect::<Result<Vec<_>>>()?;
        Ok(Output::new(schema, everything.into_iter().map(Ok)))
    }
}

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// An empty SETTINGS frame: what a client sends right after the preface.
const SETTINGS: &[u8] = &[0, 0, 0, 4, 0, 0, 0, 0, 0];

/// Reads until the server closes the socket; panics if it is still open at `deadline`.
fn wait_closed(mut s: TcpStream, deadline: Instant, what: &str) {
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "{what}: still open");
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) | Err(_) if Instant::now() < deadline => return,
            Ok(_) => continue,
            Err(e) => panic!("{what}: still open ({e})"),
        }
    }
}

#[test]
fn silent_half_open_and_idle_connections_are_closed() {
    let limits = Limits { start: Duration::from_secs(1), idle: Duration::from_secs(2), ..Limits::default() };
    let server = Server::builder(Empty).limits(limits).start().unwrap();
    let addr = server.addr().unwrap();
    let silent: Vec<_> = (0..100).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let truncated: Vec<_> = (0..100)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&PREFACE[..10]).unwrap();
            s
        })
        .collect();
    let mut idle = TcpStream::connect(addr).unwrap();
    idle.write_all(PREFACE).unwrap();
    idle.write_all(SETTINGS).unwrap();

    // While they wait, real clients are served.
    let client = Client::connect(&server.url()).unwrap();
    assert_eq!(client.list_flights(b"").unwrap().len(), 0);

    let deadline = Instant::now() + Duration::from_secs(10);
    for (i, s) in silent.into_iter().enumerate() {
        wait_closed(s, deadline, &format!("silent socket {i}"));
    }
    for (i, s) in truncated.into_iter().enumerate() {
        wait_closed(s, deadline, &format!("truncated preface {i}"));
    }
    wait_closed(idle, deadline, "idle connection");
    // The client's own idle connection went too; a new one is made for the next call.
    assert_eq!(client.list_flights(b"").unwrap().len(), 0);
}

/// Opens a DoPut whose first message says it is `len` bytes long and carries `sent` of them.
async fn put(
    client: &h2::client::SendRequest<bytes::Bytes>,
    len: u32,
    sent: usize,
) -> (h2::client::ResponseFuture, h2::SendStream<bytes::Bytes>) {
    let request = http::Request::post("/arrow.flight.protocol.FlightService/DoPut")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (response, mut body) = client.clone().ready().await.unwrap().send_request(request, false).unwrap();
    let mut message = vec![0u8];
    message.extend_from_slice(&len.to_be_bytes());
    message.resize(5 + sent, 0);
    body.send_data(message.into(), false).unwrap();
    (response, body)
}

/// The call's gRPC status, from its headers or its trailers.
async fn grpc_status(response: h2::client::ResponseFuture) -> String {
    let response = tokio::time::timeout(Duration::from_secs(20), response).await.expect("no answer").unwrap();
    if let Some(s) = response.headers().get("grpc-status") {
        return s.to_str().unwrap().to_string();
    }
    let mut body = response.into_body();
    while let Some(chunk) = body.data().await {
        let _ = chunk;
    }
    let trailers = body.trailers().await.unwrap().expect("no trailers");
    trailers["grpc-status"].to_str().unwrap().to_string()
}

#[test]
fn request_messages_share_one_bound_and_a_paused_sender_gives_its_room_back() {
    let limits = Limits { request_bytes: 32 << 20, message_stall: Duration::from_secs(1), ..Limits::default() };
    let server = Server::builder(Empty).limits(limits).start().unwrap();
    let addr = server.addr().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let socket = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (client, connection) = h2::client::handshake(socket).await.unwrap();
        tokio::spawn(connection);
        // The first takes 24 of the 32 MiB and trickles the rest; the second finds no room.
        let (trickling, mut body) = put(&client, 24 << 20, 1 << 20).await;
        let trickle = tokio::spawn(async move {
            for _ in 0..12 {
                tokio::time::sleep(Duration::from_millis(250)).await;
                body.send_data(vec![0u8; 1024].into(), false).unwrap();
            }
            body // then it pauses, still in the middle of its message
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let started = Instant::now();
        let (waiting, _waiting_body) = put(&client, 24 << 20, 1 << 20).await;
        assert_eq!(grpc_status(waiting).await, "8", "RESOURCE_EXHAUSTED for want of room");
        let _paused_body = trickle.await.unwrap();
        assert_eq!(grpc_status(trickling).await, "4", "DEADLINE_EXCEEDED once its sender paused");
        assert!(started.elapsed() < Duration::from_secs(10));
        // Their room is back: a whole message of that size is read (and refused only as not
        // being Flight data), while a message past the whole bound is refused at once.
        let (whole, _body) = put(&client, 24 << 20, 24 << 20).await;
        let status = grpc_status(whole).await;
        assert!(status != "8" && status != "4", "a message that fits was refused ({status})");
        let (huge, _body) = put(&client, 64 << 20, 0).await;
        assert_eq!(grpc_status(huge).await, "8");
    });
    // Other calls were never held up.
    assert_eq!(Client::connect(&server.url()).unwrap().list_flights(b"").unwrap().len(), 0);
}

#[test]
fn paused_exchanges_take_at_most_half_the_handler_threads() {
    let server = Server::builder(Empty).handler_threads(4).start().unwrap();
    let url = server.url();
    let descriptor = FlightDescriptor::new_path(vec!["x".into()]);
    let schema = std::sync::Arc::new(arrow_schema::Schema::empty());
    // Clients that begin and then pause: each holds a handler thread while its handler waits.
    for _ in 0..2 {
        let (url, descriptor, schema) = (url.clone(), descriptor.clone(), schema.clone());
        std::thread::spawn(move || {
            let client = Client::connect(&url).unwrap();
            let paused = client.do_exchange(&descriptor, &schema);
            std::thread::sleep(Duration::from_secs(3600));
            drop(paused);
        });
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.calls().open() < 2 {
        assert!(Instant::now() < deadline, "the paused exchanges never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let client = Client::connect(&url).unwrap();
    let refused = client.do_exchange(&descriptor, &schema).err().expect("a third exchange refused");
    assert!(refused.to_string().contains("too many exchanges"), "{refused}");
    // The other half of the threads still serve everything else.
    assert_eq!(client.list_flights(b"").unwrap().len(), 0);
}
