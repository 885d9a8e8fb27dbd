//! A connection: streams opened and accepted over the shared engine.

use std::sync::Arc;
use std::time::Duration;

use super::NativeRma;
use super::engine::{Inner, Waiting};
use super::stream::Stream;
use super::{Config, FrameRx, FrameTx};
use crate::error::Result;
use crate::proto::handshake::Peer;
use crate::proto::session::{Ready, Role};

/// An authenticated connection carrying many concurrent streams. Cheap to clone; the
/// connection closes when the last clone and stream are gone.
///
/// One thread can serve every stream of a connection with [`Connection::next_ready`]:
///
/// ```
/// use std::collections::HashMap;
/// use wirespeed::{Config, Key, Ready, connect, listen};
///
/// # fn main() -> wirespeed::Result<()> {
/// let key = Key::new("a shared secret")?;
/// let listener = listen("tcp://127.0.0.1:0", &key, &Config::default())?;
/// let client = connect(listener.url(), &key, &Config::default())?;
/// let server = listener.accept()?;
/// for i in 0..3u8 {
///     let stream = client.open_stream()?;
///     stream.send(&[i], &[b"body"])?;
///     stream.finish()?;
/// }
/// let (mut streams, mut headers) = (HashMap::new(), Vec::new());
/// while headers.len() < 3 {
///     match server.next_ready()? {
///         Ready::Accept => {
///             let stream = server.accept_stream()?;
///             streams.insert(stream.id(), stream);
///         }
///         Ready::Stream(id) => match streams[&id].recv()? {
///             Some(message) => headers.push(message.header[0]),
///             None => drop(streams.remove(&id)), // finished
///         },
///     }
/// }
/// headers.sort();
/// assert_eq!(headers, [0, 1, 2]);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Connection {
    pub(super) inner: Arc<Inner>,
}

impl Connection {
    pub(crate) fn new(
        role: Role,
        peer: Peer,
        rx: Box<dyn FrameRx>,
        tx: Box<dyn FrameTx>,
        native_rma: Option<Box<dyn NativeRma>>,
        config: &Config,
        name: String,
    ) -> Self {
        Connection { inner: Arc::new(Inner::new(role, peer, rx, tx, native_rma, config, name)) }
    }

    /// Whether messages are written straight into transport memory (a shared ring) rather
    /// than copied from the sender's buffers: see [`Stream::send_filled`].
    pub fn fills_in_place(&self) -> bool {
        self.inner.fills_in_place
    }

    /// Who is on the other end, for messages.
    pub fn peer(&self) -> &str {
        &self.inner.name
    }

    /// A 32-byte key for `label` that both ends of this connection derive alike from its
    /// handshake, and no other connection shares: keys for layers above (encryption of a
    /// transfer, say) that never travel.
    pub fn derive_key(&self, label: &[u8]) -> [u8; 32] {
        self.inner.peer.derive_key(label)
    }

    /// Opens a new stream; the peer sees it with its first message.
    pub fn open_stream(&self) -> Result<Stream> {
        let id = self.inner.lock().session.open_stream()?;
        Ok(Stream::new(self.inner.clone(), id))
    }

    /// Waits for a stream the peer opened.
    pub fn accept_stream(&self) -> Result<Stream> {
        self.accept_stream_timeout(self.inner.timeout)
    }

    /// As [`Connection::accept_stream`], waiting at most `timeout`.
    pub fn accept_stream_timeout(&self, timeout: Duration) -> Result<Stream> {
        let id = self.inner.wait_for(timeout, Waiting::ForAccept, |s| s.poll_accept())?;
        Ok(Stream::new(self.inner.clone(), id))
    }

    /// Waits until a receive would not wait: one thread can serve many streams this way
    /// instead of a thread per stream. [`Ready::Stream`] names a stream with a message, body
    /// bytes, its end or a reset waiting; receive from it, and drop it once it is finished.
    /// [`Ready::Accept`] means [`Connection::accept_stream`] returns at once. Streams take
    /// turns, so a busy one does not starve the rest.
    pub fn next_ready(&self) -> Result<Ready> {
        self.next_ready_timeout(self.inner.timeout)
    }

    /// As [`Connection::next_ready`], waiting at most `timeout`.
    pub fn next_ready_timeout(&self, timeout: Duration) -> Result<Ready> {
        self.inner.wait_for(timeout, Waiting::ForAny, |s| s.poll_ready())
    }

    /// Closes gracefully: the peer reads what was sent, then sees the connection closed.
    pub fn close(&self) {
        self.inner.close();
    }
}
