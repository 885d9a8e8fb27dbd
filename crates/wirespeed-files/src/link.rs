//! Copy-protocol messages over wirespeed streams.

use wirespeed::{Body, Stream};

use crate::error::{FilesError, Result};
use crate::proto::{FailClass, Msg};

pub fn send(stream: &Stream, msg: &Msg, body: &[&[u8]]) -> Result<()> {
    Ok(stream.send(&msg.encode(), body)?)
}

/// The next whole message, or `None` when the peer finished the stream. A `Fail` from the
/// peer becomes [`FilesError::Remote`].
pub fn recv(stream: &Stream) -> Result<Option<(Msg, Body)>> {
    let Some(m) = stream.recv()? else { return Ok(None) };
    Ok(Some((check(Msg::decode(&m.header)?)?, m.body)))
}

/// The next message's header only; its body is read with `Stream::read_chunk`.
pub fn recv_start(stream: &Stream) -> Result<Option<(Msg, u64)>> {
    let Some(inc) = stream.recv_start()? else { return Ok(None) };
    Ok(Some((check(Msg::decode(&inc.header)?)?, inc.body_len)))
}

fn check(msg: Msg) -> Result<Msg> {
    match msg {
        Msg::Fail { class, message } => Err(FilesError::Remote { class: FailClass::from_u8(class), message }),
        m => Ok(m),
    }
}

/// Ends a stream from the side that spoke last: finish, then wait for the peer to finish
/// its side too, so dropping the stream is clean (a stream dropped while open is reset).
pub fn close(stream: &Stream) -> Result<()> {
    stream.finish()?;
    match stream.recv()? {
        None => Ok(()),
        Some(_) => Err(FilesError::Protocol("the peer sent more after the end".into())),
    }
}

/// Tells the peer why we stop; best effort, as the link may be what failed.
pub fn fail(stream: &Stream, e: &FilesError) {
    let msg = Msg::Fail { class: e.class() as u8, message: e.to_string() };
    let _ = stream.send(&msg.encode(), &[]);
}

pub fn unexpected(what: &str, msg: &Msg) -> FilesError {
    FilesError::Protocol(format!("unexpected message {msg:?} {what}"))
}
