//! One connection between an input and a compute node: its control stream, and a thread
//! that reads it and hands each message, tagged with the peer, to the node's one loop.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

use wirespeed::{Connection, Stream};

use crate::error::{FlesError, Result, Violation};
use crate::wire::Msg;

/// What a link's reader passes on: a message from peer `peer`, or how its stream ended.
pub(crate) enum Event {
    Msg(usize, Msg),
    /// The peer finished its stream (Ok) or the connection failed.
    Closed(usize, Result<()>),
    /// The consumer let go of a timeslice it kept (compute nodes).
    Released(u64),
    /// The consumer failed: the node stops with its error.
    Failed(FlesError),
}

pub(crate) struct Link {
    pub conn: Connection,
    stream: Arc<Stream>,
}

impl Link {
    pub(super) fn new(conn: Connection, stream: Stream) -> Self {
        Link { conn, stream: Arc::new(stream) }
    }

    pub(super) fn send(&self, m: &Msg) -> Result<()> {
        self.send_raw(m).map_err(|e| net("sending", e))
    }

    pub(super) fn send_raw(&self, m: &Msg) -> wirespeed::Result<()> {
        self.stream.send(&m.encode(), &[])
    }

    /// Waits for the next message, for the handshake before the reader starts.
    pub(super) fn recv(&self) -> Result<Msg> {
        match self.stream.recv().map_err(|e| net("receiving", e))? {
            Some(m) => Msg::decode(&m.header),
            None => Err(Violation::ClosedDuringSetup.into()),
        }
    }

    /// Starts the thread that reads the stream into `events`, as peer `peer`. A quiet stream
    /// is not an error here: the node judges its peers' silence.
    pub(super) fn start_reader(&self, peer: usize, events: Sender<Event>) -> Result<()> {
        let stream = self.stream.clone();
        std::thread::Builder::new()
            .name(format!("fles-link-{peer}"))
            .spawn(move || {
                let end = loop {
                    match stream.recv() {
                        Ok(Some(m)) => match Msg::decode(&m.header) {
                            Ok(msg) => {
                                if events.send(Event::Msg(peer, msg)).is_err() {
                                    return; // the node is gone
                                }
                            }
                            Err(e) => break Err(e),
                        },
                        Ok(None) => break Ok(()),
                        Err(wirespeed::Error::Timeout(_)) => continue,
                        Err(e) => break Err(net("receiving", e)),
                    }
                };
                let _ = events.send(Event::Closed(peer, end));
            })
            .map_err(|e| crate::error::io("starting a reader thread", e))?;
        Ok(())
    }

    pub(super) fn finish(&self) {
        let _ = self.stream.finish();
    }
}

/// After a node finished its own streams, waits (up to `limit`) for the peers still `open`
/// to finish theirs, so that connections close while the process runs, not during its exit
/// (UCX has crashed tearing workers down then).
pub(crate) fn await_closes(events: &Receiver<Event>, mut open: Vec<bool>, limit: Duration) {
    let deadline = Instant::now() + limit;
    while open.iter().any(|&o| o) {
        match events.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Event::Closed(peer, _)) => open[peer] = false,
            Ok(_) => {}
            Err(_) => return,
        }
    }
}

pub(crate) fn net(what: impl Into<String>, e: wirespeed::Error) -> FlesError {
    crate::error::connection(what, e)
}

/// A connection's control stream with a long per-message timeout (the node's loop has its
/// own limit on stalls).
pub(crate) fn patient(mut s: Stream, timeout: Duration) -> Stream {
    s.set_timeout(timeout);
    s
}
