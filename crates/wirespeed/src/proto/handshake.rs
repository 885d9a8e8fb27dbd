//! Mutual challenge-response on a pre-shared key, as a sans-IO state machine.
//!
//! ```text
//! client -> server  Hello  (magic, version, params, nonce_c)
//! server -> client  Hello  (magic, version, params, nonce_s, proof_s)
//! client -> server  Auth   (proof_c)            -- only if proof_s verified
//! server -> client  AuthOk                      -- only if proof_c verified
//! proof_x = HMAC-SHA256(key, label_x || hello_c || hello_s[..52])
//! secret  = HMAC-SHA256(key, "wirespeed-v1 session secret" || hello_c || hello_s[..52])
//! ```
//! The secret never travels: both ends compute it, and it differs for every connection, so
//! layers above derive per-connection keys from it ([`Peer::derive_key`]).
//! Nothing but these frames is accepted until `AuthOk`, and a failure is reported with an
//! Error frame before the connection closes.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::codec::{self, Reader, Writer};
use super::frame::{FrameHeader, Kind, encode_control};
use crate::error::{Error, ErrorCode, Violation};
use crate::fabric::Fabric;

pub const MAGIC: [u8; 4] = *b"WSPD";
pub const VERSION: u16 = 3;
const HELLO_LEN: usize = 52;
const PROOF_LEN: usize = 32;
const CLIENT_LABEL: &[u8] = b"wirespeed-v1 client proof";
const SERVER_LABEL: &[u8] = b"wirespeed-v1 server proof";
const SECRET_LABEL: &[u8] = b"wirespeed-v1 session secret";

/// What each side announces about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// What follows the handshake on its socket. Both ends must use the same: a client that
    /// asks for UCX from a TCP listener would read frames as a UCX address.
    pub fabric: Fabric,
    /// Most concurrent streams this side accepts from the peer.
    pub max_streams: u32,
    /// Initial credit, in bytes, this side grants the peer on every stream.
    pub stream_window: u64,
}

/// An authenticated peer: what it announced, and the secret this connection shares with it.
#[derive(Clone, PartialEq, Eq)]
pub struct Peer {
    pub params: Params,
    secret: [u8; 32],
}

impl Peer {
    /// The other end of an in-process pair, which needs no handshake: nobody outside the
    /// process can reach it. `secret` is the pair's, random and the same at both ends.
    pub(crate) fn in_process(params: Params, secret: [u8; 32]) -> Self {
        Peer { params, secret }
    }

    /// A 32-byte key for `label`, the same at both ends of this connection and unrelated to
    /// any other connection's.
    pub fn derive_key(&self, label: &[u8]) -> [u8; 32] {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.secret).expect("HMAC takes keys of any length");
        mac.update(label);
        mac.finalize().into_bytes().into()
    }
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer").field("params", &self.params).finish_non_exhaustive()
    }
}

/// Output of a successful step: bytes to send, and the authenticated peer once done.
#[derive(Debug, Default)]
pub struct Progress {
    pub send: Vec<u8>,
    pub done: Option<Peer>,
}

/// A failed handshake: the error, and the Error frame to send the peer before closing.
#[derive(Debug)]
pub struct Failure {
    pub error: Error,
    pub send: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    ClientAwaitHello,
    ClientAwaitOk,
    ServerAwaitHello,
    ServerAwaitAuth,
    Done,
    Failed,
}

pub struct Handshake {
    key: Vec<u8>,
    /// Ours, which the peer's must match.
    fabric: Fabric,
    hello_c: [u8; HELLO_LEN],
    hello_s: [u8; HELLO_LEN],
    peer: Option<Params>,
    state: State,
}

impl Handshake {
    /// Starts the client side; returns the state machine and the Hello to send.
    pub fn client(key: &[u8], ours: Params, nonce: [u8; 32]) -> (Self, Vec<u8>) {
        let hello_c = encode_hello(&ours, &nonce);
        let hs = Handshake {
            key: key.to_vec(),
            fabric: ours.fabric,
            hello_c,
            hello_s: [0; HELLO_LEN],
            peer: None,
            state: State::ClientAwaitHello,
        };
        let mut out = Vec::new();
        encode_control(&mut out, FrameHeader::new(Kind::Hello, 0), &hello_c);
        (hs, out)
    }

    pub fn server(key: &[u8], ours: Params, nonce: [u8; 32]) -> Self {
        Handshake {
            key: key.to_vec(),
            fabric: ours.fabric,
            hello_c: [0; HELLO_LEN],
            hello_s: encode_hello(&ours, &nonce),
            peer: None,
            state: State::ServerAwaitHello,
        }
    }

    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    pub fn on_frame(&mut self, h: &FrameHeader, meta: &[u8]) -> Result<Progress, Failure> {
        let result = self.step(h, meta);
        if result.is_err() {
            self.state = State::Failed;
        }
        result
    }

    fn step(&mut self, h: &FrameHeader, meta: &[u8]) -> Result<Progress, Failure> {
        if h.kind == Kind::Error {
            let message = String::from_utf8_lossy(meta).into_owned();
            let code = ErrorCode(h.aux);
            let error = match code {
                ErrorCode::AUTH => Error::Auth("the peer does not share our key"),
                _ => Error::Remote { code, message },
            };
            return Err(Failure { error, send: Vec::new() });
        }
        match (self.state, h.kind) {
            (State::ServerAwaitHello, Kind::Hello) if meta.len() == HELLO_LEN => {
                let peer = decode_hello(meta).map_err(fail_with_frame)?;
                self.hello_c.copy_from_slice(meta);
                self.peer = Some(peer);
                let mut reply = self.hello_s.to_vec();
                reply.extend_from_slice(&self.proof(SERVER_LABEL));
                let mut send = Vec::new();
                encode_control(&mut send, FrameHeader::new(Kind::Hello, 0), &reply);
                self.state = State::ServerAwaitAuth;
                Ok(Progress { send, done: None })
            }
            (State::ClientAwaitHello, Kind::Hello) if meta.len() == HELLO_LEN + PROOF_LEN => {
                let peer = decode_hello(&meta[..HELLO_LEN]).map_err(fail_with_frame)?;
                self.hello_s.copy_from_slice(&meta[..HELLO_LEN]);
                if !self.verify(SERVER_LABEL, &meta[HELLO_LEN..]) {
                    return Err(fail_with_frame(Error::Auth("the server does not know our key")));
                }
                self.same_fabric(&peer)?;
                self.peer = Some(peer);
                let mut send = Vec::new();
                encode_control(&mut send, FrameHeader::new(Kind::Auth, 0), &self.proof(CLIENT_LABEL));
                self.state = State::ClientAwaitOk;
                Ok(Progress { send, done: None })
            }
            (State::ServerAwaitAuth, Kind::Auth) if meta.len() == PROOF_LEN => {
                if !self.verify(CLIENT_LABEL, meta) {
                    return Err(fail_with_frame(Error::Auth("the client's key is wrong")));
                }
                // A client that checked would have given up already; this one did not.
                if let Some(peer) = &self.peer {
                    self.same_fabric(peer)?;
                }
                let mut send = Vec::new();
                encode_control(&mut send, FrameHeader::new(Kind::AuthOk, 0), &[]);
                self.state = State::Done;
                Ok(Progress { send, done: self.peer() })
            }
            (State::ClientAwaitOk, Kind::AuthOk) if meta.is_empty() => {
                self.state = State::Done;
                Ok(Progress { send: Vec::new(), done: self.peer() })
            }
            _ => Err(fail_with_frame(Violation::HandshakeFrame { kind: h.kind.name(), meta_len: meta.len() }.into())),
        }
    }

    /// Checked once the peer has proven the key, so a stranger learns nothing from it.
    fn same_fabric(&self, peer: &Params) -> Result<(), Failure> {
        if peer.fabric == self.fabric {
            return Ok(());
        }
        Err(fail_with_frame(Error::WrongFabric { ours: self.fabric, theirs: peer.fabric }))
    }

    fn peer(&self) -> Option<Peer> {
        let params = self.peer?;
        Some(Peer { params, secret: self.mac(SECRET_LABEL).finalize().into_bytes().into() })
    }

    fn proof(&self, label: &[u8]) -> [u8; PROOF_LEN] {
        self.mac(label).finalize().into_bytes().into()
    }

    /// Constant-time comparison through `Mac::verify_slice`.
    fn verify(&self, label: &[u8], proof: &[u8]) -> bool {
        self.mac(label).verify_slice(proof).is_ok()
    }

    fn mac(&self, label: &[u8]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key).expect("HMAC takes keys of any length");
        mac.update(label);
        mac.update(&self.hello_c);
        mac.update(&self.hello_s);
        mac
    }
}

fn encode_hello(p: &Params, nonce: &[u8; 32]) -> [u8; HELLO_LEN] {
    let mut w = Writer::with_capacity(HELLO_LEN);
    w.bytes(&MAGIC);
    w.u16(VERSION);
    w.u8(p.fabric.wire_id());
    w.u8(0);
    w.u32(p.max_streams);
    w.u64(p.stream_window);
    w.bytes(nonce);
    let mut b = [0u8; HELLO_LEN];
    b.copy_from_slice(&w.into_inner());
    b
}

/// Reads a hello of exactly `HELLO_LEN` bytes (the caller checked its length).
fn decode_hello(b: &[u8]) -> Result<Params, Error> {
    let fields =
        |r: &mut Reader| Ok((r.array::<4>()?, r.u16()?, r.u8()?, r.u8()?, r.u32()?, r.u64()?, r.array::<32>()?));
    let (magic, version, fabric, _, max_streams, stream_window, _nonce) =
        codec::read_all(b, fields).ok_or(Violation::Malformed("hello"))?;
    if magic != MAGIC {
        return Err(Error::BadMagic);
    }
    if version != VERSION {
        return Err(Error::Version { ours: VERSION, theirs: version });
    }
    let fabric = Fabric::from_wire_id(fabric).ok_or(Violation::UnknownFabric(fabric))?;
    if stream_window == 0 || max_streams == 0 {
        return Err(Violation::NoStreamWindow.into());
    }
    Ok(Params { fabric, max_streams, stream_window })
}

/// Encodes an Error frame reporting `code` and `message`.
pub fn error_frame(code: ErrorCode, message: &str) -> Vec<u8> {
    let mut h = FrameHeader::new(Kind::Error, 0);
    h.aux = code.0;
    let mut out = Vec::new();
    encode_control(&mut out, h, &message.as_bytes()[..message.len().min(1024)]);
    out
}

fn fail_with_frame(error: Error) -> Failure {
    let message = match &error {
        Error::Version { ours, theirs } => format!("unsupported version {theirs}; this peer speaks {ours}"),
        other => other.to_string(),
    };
    Failure { send: error_frame(error.code(), &message), error }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::decoder::FrameDecoder;
    use crate::proto::frame::{HEADER_LEN, Limits};

    const P: Params = Params { fabric: Fabric::Tcp, max_streams: 16, stream_window: 1 << 20 };

    fn frames(bytes: &[u8]) -> Vec<(FrameHeader, Vec<u8>)> {
        let mut d = FrameDecoder::new(Limits::default());
        let mut out = vec![];
        let mut off = 0;
        while off < bytes.len() {
            off += d.feed(&bytes[off..]).unwrap();
            if let Some(f) = d.take_frame() {
                out.push((f.header, f.meta));
            }
        }
        out
    }

    fn run(client_key: &[u8], server_key: &[u8]) -> (Result<Peer, Error>, Result<Peer, Error>) {
        run_with(client_key, P, server_key, P)
    }

    fn run_with(
        client_key: &[u8],
        cp: Params,
        server_key: &[u8],
        sp: Params,
    ) -> (Result<Peer, Error>, Result<Peer, Error>) {
        let (mut c, hello) = Handshake::client(client_key, cp, [1; 32]);
        let mut s = Handshake::server(server_key, sp, [2; 32]);
        let mut to_server = hello;
        let (mut c_res, mut s_res) = (None, None);
        for _ in 0..4 {
            let mut to_client = vec![];
            for (h, m) in frames(&std::mem::take(&mut to_server)) {
                match s.on_frame(&h, &m) {
                    Ok(p) => {
                        to_client.extend(p.send);
                        if let Some(d) = p.done {
                            s_res = Some(Ok(d));
                        }
                    }
                    Err(f) => {
                        to_client.extend(f.send);
                        s_res = Some(Err(f.error));
                    }
                }
            }
            for (h, m) in frames(&to_client) {
                match c.on_frame(&h, &m) {
                    Ok(p) => {
                        to_server.extend(p.send);
                        if let Some(d) = p.done {
                            c_res = Some(Ok(d));
                        }
                    }
                    Err(f) => {
                        to_server.extend(f.send);
                        c_res = Some(Err(f.error));
                    }
                }
            }
        }
        (c_res.expect("client finished"), s_res.expect("server finished"))
    }

    #[test]
    fn different_fabrics_fail_at_the_client_and_the_server_hears_why() {
        let ucx = Params { fabric: Fabric::Ucx, ..P };
        let (c, s) = run_with(b"k", ucx, b"k", P);
        assert!(matches!(c, Err(Error::WrongFabric { ours: Fabric::Ucx, theirs: Fabric::Tcp })), "{c:?}");
        assert!(matches!(&s, Err(Error::Remote { message, .. }) if message.contains("tcp")), "{s:?}");
        // A wrong key is still reported as such, not as the fabric.
        let (c, _) = run_with(b"k", ucx, b"other", P);
        assert!(matches!(c, Err(Error::Auth(_))), "{c:?}");
    }

    #[test]
    fn same_key_authenticates_both_ways() {
        let (c, s) = run(b"secret", b"secret");
        let (c, s) = (c.unwrap(), s.unwrap());
        assert_eq!((c.params, s.params), (P, P));
        // Both ends derive the same keys; other labels and other keys give other ones.
        assert_eq!(c.derive_key(b"a"), s.derive_key(b"a"));
        assert_ne!(c.derive_key(b"a"), c.derive_key(b"b"));
        let (other, _) = run(b"other", b"other");
        assert_ne!(other.unwrap().derive_key(b"a"), c.derive_key(b"a"));
    }

    #[test]
    fn wrong_key_fails_on_both_sides() {
        let (c, s) = run(b"secret", b"other");
        assert!(matches!(c, Err(Error::Auth(_))), "{c:?}");
        assert!(matches!(s, Err(Error::Auth(_))), "{s:?}");
    }

    #[test]
    fn wrong_version_is_reported() {
        let mut s = Handshake::server(b"k", P, [2; 32]);
        let mut hello = encode_hello(&P, &[1; 32]);
        hello[4] = 9;
        let mut h = FrameHeader::new(Kind::Hello, 0);
        h.meta_len = HELLO_LEN as u32;
        let f = s.on_frame(&h, &hello).unwrap_err();
        assert!(matches!(f.error, Error::Version { ours: VERSION, theirs: 9 }));
        let (eh, msg) = &frames(&f.send)[0];
        assert_eq!((eh.kind, eh.aux), (Kind::Error, ErrorCode::VERSION.0));
        assert!(String::from_utf8_lossy(msg).contains("unsupported version 9"));
    }

    #[test]
    fn data_before_auth_is_refused() {
        let mut s = Handshake::server(b"k", P, [2; 32]);
        let f = s.on_frame(&FrameHeader::new(Kind::Message, 1), &[0; 8]).unwrap_err();
        assert!(matches!(f.error, Error::PeerMisbehaved(Violation::HandshakeFrame { .. })));
    }

    /// The full handshake of docs/PROTOCOL.md: key "key", nonces of 0x01 and 0x02 bytes.
    #[test]
    fn test_vector_handshake() {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let p = Params { fabric: Fabric::Tcp, max_streams: 16, stream_window: 1 << 20 };
        let (mut c, hello) = Handshake::client(b"key", p, [1; 32]);
        let mut s = Handshake::server(b"key", p, [2; 32]);
        assert_eq!(
            hex(&hello),
            "010000000000000034000000000000000000000000000000\
             5753504403000000100000000000100000000000010101010101010101010101010101010101010101010101\
             0101010101010101"
        );
        let (h, m) = &frames(&hello)[0];
        let server_hello = s.on_frame(h, m).unwrap().send;
        assert_eq!(
            hex(&server_hello[HEADER_LEN + HELLO_LEN..]),
            "daaf693c8df0bd61829d613f7fa4bef24de0f4fb3de3c0c0a943bdbf9defb897"
        );
        let (h, m) = &frames(&server_hello)[0];
        let auth = c.on_frame(h, m).unwrap().send;
        assert_eq!(
            hex(&auth),
            "020000000000000020000000000000000000000000000000\
             e99814846b279146838250e993667a8a0c286b50bd6712e0de928d023eb05494"
        );
        let (h, m) = &frames(&auth)[0];
        let ok = s.on_frame(h, m).unwrap();
        assert_eq!(hex(&ok.send), "030000000000000000000000000000000000000000000000");
        assert_eq!(ok.done.map(|d| d.params), Some(p));
    }

    #[test]
    fn test_vector_hello() {
        // Kept in step with docs/PROTOCOL.md.
        let b = encode_hello(&P, &[0xAB; 32]);
        assert_eq!(&b[..20], &[b'W', b'S', b'P', b'D', 3, 0, 0, 0, 16, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0, 0]);
        assert_eq!(b[20..], [0xAB; 32]);
    }
}
