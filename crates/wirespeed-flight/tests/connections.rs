//! The gRPC port's bounds, with raw sockets and a real client: sockets that never start HTTP/2
//! or stop half way are closed, idle connections are closed, and the service keeps answering.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use arrow_flight::{FlightDescriptor, FlightInfo};
use wirespeed_flight::{Client, Error, Handler, Limits, Output, Result, Server};

struct Empty;

impl Handler for Empty {
    fn get_flight_info(&self, _descriptor: &FlightDescriptor) -> Result<FlightInfo> {
        Err(Error::not_found("nothing here"))
    }

    fn do_get(&self, _ticket: &[u8]) -> Result<Output> {
        Err(Error::not_found("nothing here"))
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
    let addr = server.addr();
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
