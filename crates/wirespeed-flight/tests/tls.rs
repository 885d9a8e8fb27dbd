//! gRPC over TLS between our server and client: the server's certificate checked against the
//! client's roots, mutual TLS, and what each refuses. Certificates are made here with rcgen.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_flight::{FlightDescriptor, FlightEndpoint, FlightInfo, Ticket};
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};
use wirespeed::Key;
use wirespeed_flight::{
    Client, ClientTls, Code, Fabric, Handler, Method, Output, Payload, PlaneChoice, PlaneClient, Result, Server,
    ServerTls,
};

/// One flight, "t", of 1000 rows.
struct One;

fn batch() -> RecordBatch {
    RecordBatch::try_from_iter([("x", Arc::new(Int64Array::from_iter_values(0..1000)) as ArrayRef)]).unwrap()
}

impl Handler for One {
    fn get_flight_info(&self, descriptor: &FlightDescriptor) -> Result<FlightInfo> {
        Ok(FlightInfo::new()
            .try_with_schema(&batch().schema())?
            .with_descriptor(descriptor.clone())
            .with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new("t"))))
    }

    fn do_get(&self, _ticket: &[u8]) -> Result<Output> {
        let b = batch();
        Ok(Output::new(b.schema(), std::iter::once(Ok(Payload::batch(b)))))
    }
}

struct Authority {
    issuer: Issuer<'static, KeyPair>,
    pem: Vec<u8>,
}

fn authority(name: &str) -> Authority {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    Authority { pem: cert.pem().into_bytes(), issuer: Issuer::new(params, key) }
}

/// A certificate and key issued by `ca`: (chain PEM, key PEM).
fn issue(ca: &Authority, names: &[&str], purpose: ExtendedKeyUsagePurpose) -> (Vec<u8>, Vec<u8>) {
    let mut params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    params.extended_key_usages = vec![purpose];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    (cert.pem().into_bytes(), key.serialize_pem().into_bytes())
}

fn key() -> Key {
    Key::new(b"tls test key 0123456789".to_vec()).unwrap()
}

fn serve(ca: &Authority, client_ca: Option<&Authority>) -> Server {
    serve_as(ca, &["localhost", "127.0.0.1"], client_ca)
}

fn serve_as(ca: &Authority, names: &[&str], client_ca: Option<&Authority>) -> Server {
    let (cert_chain, private_key) = issue(ca, names, ExtendedKeyUsagePurpose::ServerAuth);
    let tls = ServerTls { cert_chain, private_key, client_ca: client_ca.map(|c| c.pem.clone()) };
    Server::builder(One).key(key()).planes(&[Fabric::Shm, Fabric::Tcp]).tls(tls).start().unwrap()
}

fn rows(client: &Client) -> Result<usize> {
    let info = client.get_flight_info(&FlightDescriptor::new_path(vec!["t".into()]))?;
    let mut n = 0;
    for b in client.do_get(&info.endpoint[0])? {
        n += b?.num_rows();
    }
    Ok(n)
}

fn trusting(ca: &Authority) -> ClientTls {
    ClientTls { roots: Some(ca.pem.clone()), ..ClientTls::default() }
}

#[test]
fn a_client_that_trusts_the_ca_gets_data_on_every_plane() {
    let ca = authority("test CA");
    let server = serve(&ca, None);
    assert!(server.url().starts_with("grpc+tls://127.0.0.1:"), "{}", server.url());
    for transport in [PlaneChoice::Grpc, PlaneChoice::Only(Fabric::Shm), PlaneChoice::Only(Fabric::Tcp)] {
        let client = Client::connect_tls(&server.url(), &trusting(&ca)).unwrap().with_key(key());
        assert_eq!(rows(&client.with_transport(transport)).unwrap(), 1000, "{transport:?}");
    }
}

#[test]
fn the_name_checked_is_the_urls_host_unless_overridden() {
    let ca = authority("test CA");
    let server = serve_as(&ca, &["flight.example"], None);
    let err = Client::connect_tls(&server.url(), &trusting(&ca)).err().unwrap();
    assert!(err.to_string().contains("not valid for name"), "{err}");
    let tls = ClientTls { server_name: Some("flight.example".into()), ..trusting(&ca) };
    assert_eq!(rows(&Client::connect_tls(&server.url(), &tls).unwrap()).unwrap(), 1000);
}

#[test]
fn a_server_from_another_ca_is_refused_unless_verification_is_off() {
    let server = serve(&authority("test CA"), None);
    let err = Client::connect_tls(&server.url(), &trusting(&authority("other CA"))).err().unwrap();
    assert_eq!(err.code(), Code::Unavailable);
    assert!(err.to_string().contains("UnknownIssuer"), "{err}");
    let anyone = ClientTls { skip_verification: true, ..ClientTls::default() };
    assert_eq!(rows(&Client::connect_tls(&server.url(), &anyone).unwrap()).unwrap(), 1000);
    // A plaintext client sees a failure, not data.
    let plain = server.url().replace("grpc+tls://", "grpc://");
    assert!(Client::connect(&plain).and_then(|c| rows(&c)).is_err());
}

#[test]
fn mutual_tls_lets_in_only_clients_with_a_certificate_from_its_ca() {
    let ca = authority("test CA");
    let clients = authority("client CA");
    let server = serve(&ca, Some(&clients));
    let with = |identity| ClientTls { identity, ..trusting(&ca) };
    let good = issue(&clients, &["a client"], ExtendedKeyUsagePurpose::ClientAuth);
    assert_eq!(rows(&Client::connect_tls(&server.url(), &with(Some(good))).unwrap()).unwrap(), 1000);
    let stranger = issue(&authority("stranger CA"), &["a client"], ExtendedKeyUsagePurpose::ClientAuth);
    for identity in [None, Some(stranger)] {
        let refused = Client::connect_tls(&server.url(), &with(identity)).and_then(|c| rows(&c));
        assert!(refused.is_err());
    }
}

#[test]
fn a_password_without_tls_is_refused_unless_asked_for_by_name() {
    let err = Server::builder(One).password("hunter2".into()).start().err().unwrap();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.to_string().contains("in clear"), "{err}");
    assert!(Server::builder(One).password("hunter2".into()).password_over_plaintext().start().is_ok());
    let ca = authority("test CA");
    let (cert_chain, private_key) = issue(&ca, &["localhost"], ExtendedKeyUsagePurpose::ServerAuth);
    let tls = ServerTls { cert_chain, private_key, client_ca: None };
    let server = Server::builder(One).password("hunter2".into()).tls(tls).start().unwrap();
    let url = server.url().replace("127.0.0.1", "localhost");
    let mut client = Client::connect_tls(&url, &trusting(&ca)).unwrap();
    assert_eq!(rows(&client).unwrap_err().code(), Code::Unauthenticated);
    client.authenticate("me", "hunter2").unwrap();
    assert_eq!(rows(&client).unwrap(), 1000);
}

#[test]
fn bad_tls_files_are_clear_errors() {
    let tls = ServerTls { cert_chain: b"not pem".to_vec(), private_key: b"nor this".to_vec(), client_ca: None };
    let err = Server::builder(One).tls(tls).start().err().unwrap();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.to_string().contains("certificate chain"), "{err}");
    let tls = ClientTls { roots: Some(b"garbage".to_vec()), ..ClientTls::default() };
    let err = Client::connect_tls("grpc+tls://127.0.0.1:1", &tls).err().unwrap();
    assert!(err.to_string().contains("root certificates"), "{err}");
}

/// A TCP relay to `target` that records what comes back from it.
fn relay(target: std::net::SocketAddr) -> (std::net::SocketAddr, Arc<std::sync::Mutex<Vec<u8>>>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        let (client, _) = listener.accept().unwrap();
        let server = std::net::TcpStream::connect(target).unwrap();
        let (mut up_from, mut up_to) = (client.try_clone().unwrap(), server.try_clone().unwrap());
        std::thread::spawn(move || std::io::copy(&mut up_from, &mut up_to));
        let (mut from, mut to, mut buf) = (server, client, vec![0; 64 << 10]);
        while let Ok(n @ 1..) = from.read(&mut buf) {
            record.lock().unwrap().extend_from_slice(&buf[..n]);
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    });
    (addr, seen)
}

/// The tcp plane's bytes on the wire, captured by a relay between client and plane: from a
/// server under TLS (its tcp plane sealed) the rows are not among them, though the client
/// reads them all; from one in the clear they are, so the capture would show them.
#[test]
fn a_sealed_tcp_plane_shows_nothing_of_the_data_on_the_wire() {
    let ip: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    // Rows 500 and 501 as the batch's buffer holds them.
    let needle: Vec<u8> = [500i64, 501].iter().flat_map(|v| v.to_le_bytes()).collect();
    for sealed in [false, true] {
        let planes = wirespeed_flight::PlaneServer::serve(Arc::new(One), ip, key(), &[Fabric::Tcp], sealed).unwrap();
        let listening = planes.planes()[0].1.trim_start_matches("tcp://").parse().unwrap();
        let (relay_at, seen) = relay(listening);
        let location = planes.locations(ip, Some(ip), Method::Get, b"t").remove(0);
        assert_eq!(location.contains("seal=aes-256-gcm"), sealed, "{location}");
        let location = location.replace(&listening.to_string(), &relay_at.to_string());
        let client = PlaneClient::new(key()).with_transport(PlaneChoice::Only(Fabric::Tcp));
        let rows: usize = client.get(&[location], b"t").unwrap().unwrap().map(|b| b.unwrap().num_rows()).sum();
        assert_eq!(rows, 1000, "sealed: {sealed}");
        let seen = seen.lock().unwrap();
        assert!(seen.len() > 8000, "the capture holds the call ({} bytes)", seen.len());
        assert_eq!(seen.windows(needle.len()).any(|w| w == needle), !sealed, "sealed: {sealed}");
    }
}

/// A client that drops the seal from a sealed plane's location is refused, and learns nothing.
#[test]
fn a_sealed_plane_refuses_a_call_in_the_clear() {
    let ip: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    let planes = wirespeed_flight::PlaneServer::serve(Arc::new(One), ip, key(), &[Fabric::Tcp], true).unwrap();
    let location = planes.locations(ip, Some(ip), Method::Get, b"t").remove(0).replace("&seal=aes-256-gcm", "");
    let client = PlaneClient::new(key()).with_transport(PlaneChoice::Only(Fabric::Tcp));
    let got = client.get(&[location], b"t").and_then(|r| r.unwrap().collect::<Result<Vec<_>>>());
    let e = got.expect_err("an unsealed call is refused");
    // The server answers sealed, which the client cannot read: a violation to it.
    assert!(matches!(e, wirespeed_flight::Error::Peer(_)), "{e}");
}
