//! A data-plane call's stream: the wirespeed stream itself, or, on a tcp plane under TLS, the
//! same with every message sealed (AES-256-GCM, `wirespeed::seal`, as the file tools'
//! `--encrypt`) under a key per direction that each end derives from the connection's
//! handshake. A sealed header holds its body's length, so a body cut short, dropped or moved
//! to another message fails too.

use std::ops::Deref;
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use wirespeed::proto::codec::Reader;
use wirespeed::seal::{SealKey, TAG_LEN};
use wirespeed::{Body, Buf, Connection, Message, Stream};

use crate::error::{Error, Result, Violation};
use crate::telemetry::CallRecord;

const CLIENT_TO_SERVER: &[u8] = b"wirespeed-flight plane seal, client to server";
const SERVER_TO_CLIENT: &[u8] = b"wirespeed-flight plane seal, server to client";
const AAD: &[u8] = b"wirespeed-flight plane";

/// Which end of the connection this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Client,
    Server,
}

/// A call's stream; `send`, `send_bytes` and `recv` seal and open where the plane is sealed,
/// everything else is the stream's.
pub(crate) struct CallStream {
    stream: Stream,
    seal: Option<Seal>,
    /// The error the peer ended the call with, once read: the other half of a call (a
    /// writer, while another thread reads) reports it too, as gRPC's do.
    peer_error: Mutex<Option<(i32, String, Bytes)>>,
    /// The server's record of the call, once it knows the call's method; counts the bytes.
    record: OnceLock<Arc<CallRecord>>,
}

/// The keys of both directions and each direction's next counter (a message takes two: its
/// header's, and its body's after it).
struct Seal {
    send: SealKey,
    recv: SealKey,
    sent: Mutex<u64>,
    received: Mutex<u64>,
}

impl CallStream {
    /// `stream` on `conn`, sealed when `sealed`.
    pub(crate) fn new(stream: Stream, conn: &Connection, side: Side, sealed: bool) -> Self {
        let seal = sealed.then(|| {
            let (ours, theirs) = match side {
                Side::Client => (CLIENT_TO_SERVER, SERVER_TO_CLIENT),
                Side::Server => (SERVER_TO_CLIENT, CLIENT_TO_SERVER),
            };
            Seal {
                send: SealKey::new(&conn.derive_key(ours)),
                recv: SealKey::new(&conn.derive_key(theirs)),
                sent: Mutex::new(0),
                received: Mutex::new(0),
            }
        });
        CallStream { stream, seal, peer_error: Mutex::new(None), record: OnceLock::new() }
    }

    /// Counts what the call sends and receives from now on in `record`.
    pub(crate) fn keep_record(&self, record: Arc<CallRecord>) {
        let _ = self.record.set(record);
    }

    pub(crate) fn record(&self) -> Option<Arc<CallRecord>> {
        self.record.get().cloned()
    }

    fn count_sent(&self, header: usize, body: u64) {
        if let Some(r) = self.record.get() {
            r.sent(header as u64 + body);
            if body > 0 {
                r.sent_batch();
            }
        }
    }

    /// Keeps the error the peer sent, for [`CallStream::peer_error`].
    pub(crate) fn note_peer_error(&self, code: i32, message: &str, details: &Bytes) {
        let mut kept = self.peer_error.lock().unwrap_or_else(|p| p.into_inner());
        kept.get_or_insert_with(|| (code, message.to_string(), details.clone()));
    }

    /// The error the peer ended the call with, if it has been read.
    pub(crate) fn peer_error(&self) -> Option<Error> {
        let kept = self.peer_error.lock().unwrap_or_else(|p| p.into_inner());
        kept.as_ref().map(|(code, message, details)| {
            Error::status((*code).into(), message.clone()).with_details(details.clone())
        })
    }

    pub(crate) fn send(&self, header: &[u8], body: &[&[u8]]) -> Result<()> {
        self.count_sent(header.len(), body.iter().map(|b| b.len() as u64).sum());
        match &self.seal {
            None => Ok(self.stream.send(header, body)?),
            Some(seal) => self.send_sealed(seal, header, gathered(body.iter().copied())),
        }
    }

    /// Like [`send`](Self::send), the body held by reference counts where the stream is not
    /// sealed (a sealed body is a new buffer anyway).
    pub(crate) fn send_bytes(&self, header: &[u8], body: &[Bytes]) -> Result<()> {
        self.count_sent(header.len(), body.iter().map(|b| b.len() as u64).sum());
        match &self.seal {
            None => Ok(self.stream.send_bytes(header, body)?),
            Some(seal) => self.send_sealed(seal, header, gathered(body.iter().map(|b| &b[..]))),
        }
    }

    /// Sends a body of `len` bytes that `fill` writes piece after piece: straight into
    /// transport memory where the stream has it and is not sealed.
    pub(crate) fn send_filled(
        &self,
        header: &[u8],
        len: u64,
        mut fill: impl FnMut(&mut [u8]) -> std::io::Result<()>,
    ) -> Result<()> {
        self.count_sent(header.len(), len);
        let failed = |e: std::io::Error| Error::internal(format!("reading a batch to send: {e}"));
        match &self.seal {
            None => self.stream.send_filled(header, len, fill)?.map_err(failed),
            Some(seal) => {
                let len = usize::try_from(len).map_err(|_| Error::internal("a body too large to seal"))?;
                let mut body = Vec::with_capacity(len + TAG_LEN);
                body.resize(len, 0);
                fill(&mut body).map_err(failed)?;
                self.send_sealed(seal, header, body)
            }
        }
    }

    /// Seals `body` in place (room for its tag reserved, see [`gathered`]) and sends it.
    fn send_sealed(&self, seal: &Seal, header: &[u8], mut body: Vec<u8>) -> Result<()> {
        let len = body.len();
        let mut sealed_header = (len as u64).to_le_bytes().to_vec();
        sealed_header.extend_from_slice(header);
        // The counter is taken and the message sent under one lock, so they go in one order.
        let mut counter = seal.sent.lock().expect("seal lock");
        let id = self.stream.id();
        seal.send.seal(id, *counter, AAD, &mut sealed_header, 0);
        if len > 0 {
            seal.send.seal(id, *counter + 1, AAD, &mut body, 0);
        }
        *counter += 2;
        Ok(self.stream.send(&sealed_header, &[&body])?)
    }

    pub(crate) fn recv(&self) -> Result<Option<Message>> {
        let received = self.recv_opened()?;
        if let (Some(r), Some(m)) = (self.record.get(), &received) {
            r.received(m.header.len() as u64 + m.body.len());
            if !m.body.is_empty() {
                r.received_batch();
            }
        }
        Ok(received)
    }

    fn recv_opened(&self) -> Result<Option<Message>> {
        let Some(seal) = &self.seal else { return Ok(self.stream.recv()?) };
        // Held while waiting, so that messages and counters pair up in order.
        let mut counter = seal.received.lock().expect("seal lock");
        let Some(msg) = self.stream.recv()? else { return Ok(None) };
        let unauthentic = |e: wirespeed::seal::Unauthentic| Error::from(Violation::Unsealed(e.to_string()));
        let (id, at) = (self.stream.id(), *counter);
        *counter += 2;
        let mut header = msg.header;
        seal.recv.open(id, at, AAD, &mut header).map_err(unauthentic)?;
        let len = Reader::new(&header).u64().map_err(|_| Violation::Unsealed("a header without its length".into()))?;
        header.drain(..8);
        let mut body = msg.body.to_vec();
        if len > 0 || !body.is_empty() {
            seal.recv.open(id, at + 1, AAD, &mut body).map_err(unauthentic)?;
        }
        if body.len() as u64 != len {
            return Err(Violation::Unsealed("a body of another length than its header says".into()).into());
        }
        Ok(Some(Message { header, body: Body::new(vec![Buf::from(body)]) }))
    }
}

/// A body's pieces in one buffer with room for its seal's tag.
fn gathered<'a>(pieces: impl Iterator<Item = &'a [u8]> + Clone) -> Vec<u8> {
    let len: usize = pieces.clone().map(<[u8]>::len).sum();
    let mut body = Vec::with_capacity(len + TAG_LEN);
    pieces.for_each(|p| body.extend_from_slice(p));
    body
}

impl Deref for CallStream {
    type Target = Stream;

    fn deref(&self) -> &Stream {
        &self.stream
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirespeed::transport::in_process;

    fn pair(sealed: bool) -> (CallStream, CallStream, Connection, Connection) {
        let (c, s) = in_process::pair(&wirespeed::Config::default()).unwrap();
        let client = CallStream::new(c.open_stream().unwrap(), &c, Side::Client, sealed);
        client.send(b"open", &[]).unwrap();
        let server = CallStream::new(s.accept_stream().unwrap(), &s, Side::Server, sealed);
        assert_eq!(server.recv().unwrap().unwrap().header, b"open");
        (client, server, c, s)
    }

    #[test]
    fn sealed_messages_arrive_as_sent_in_both_directions() {
        let (client, server, _c, _s) = pair(true);
        client.send(b"h1", &[b"body ", b"one"]).unwrap();
        client.send_bytes(b"h2", &[Bytes::from_static(b"two")]).unwrap();
        server.send(b"answer", &[]).unwrap();
        let m = server.recv().unwrap().unwrap();
        assert_eq!((m.header.as_slice(), m.body.to_vec().as_slice()), (&b"h1"[..], &b"body one"[..]));
        let m = server.recv().unwrap().unwrap();
        assert_eq!((m.header.as_slice(), m.body.to_vec().as_slice()), (&b"h2"[..], &b"two"[..]));
        let m = client.recv().unwrap().unwrap();
        assert_eq!((m.header.as_slice(), m.body.len()), (&b"answer"[..], 0));
    }

    #[test]
    fn a_plain_message_to_a_sealed_end_fails_and_so_does_a_sealed_one_to_a_plain_end() {
        let (c, s) = in_process::pair(&wirespeed::Config::default()).unwrap();
        let plain = CallStream::new(c.open_stream().unwrap(), &c, Side::Client, false);
        plain.send(b"open", &[b"payload"]).unwrap();
        let sealed = CallStream::new(s.accept_stream().unwrap(), &s, Side::Server, true);
        let e = sealed.recv().expect_err("a plain message");
        assert!(e.to_string().contains("failed authentication"), "{e}");
        sealed.send(b"secret header", &[b"secret body"]).unwrap();
        let m = plain.recv().unwrap().unwrap();
        assert!(!m.header.windows(6).any(|w| w == b"secret"));
        assert!(!m.body.to_vec().windows(6).any(|w| w == b"secret"));
    }
}
