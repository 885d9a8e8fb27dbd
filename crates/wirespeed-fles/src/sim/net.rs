//! What nodes say to each other in a simulation, and each actor's port: one mailbox that takes
//! transfers as soon as they are sent (as one-sided writes land). A mailbox with a receiver
//! hands transfers over in the order they were sent, so each sender's messages come in order,
//! as on a connection; a sequence number per pair checks it.

use super::engine::{Comm, Mailbox, now};
use crate::error::{Result, Violation};
use crate::model::ComponentDescriptor;
use crate::model::component::COMPONENT_DESCRIPTOR_LEN;
use crate::node::Pointers;
use crate::wire::Msg;

/// Simulated seconds that stand for "no timeout".
pub(super) const FOREVER: f64 = 1e15;

/// A message between actors.
#[derive(Debug)]
pub(super) enum SimMsg {
    /// Input → compute node: a component put in its data ring, its descriptor, and the
    /// status message that follows them (one transfer of their summed sizes).
    Component { desc: ComponentDescriptor, pointers: Pointers },
    /// Any of the real run's control messages.
    Ctl(Msg),
    /// The end of a node's stream to a peer, after everything it sent there.
    Finished,
    /// Events → node: this node is turned off.
    Die,
    /// The run is over: events and turned-off nodes stop.
    Over,
}

impl SimMsg {
    /// The bytes it takes on the wire: a component's, its descriptor's and its status
    /// message's; a control message's encoding; an end of stream or a failure nothing.
    pub(super) fn size(&self) -> u64 {
        match self {
            SimMsg::Component { desc, pointers } => {
                desc.size + COMPONENT_DESCRIPTOR_LEN as u64 + Msg::Status(*pointers).encode().len() as u64
            }
            SimMsg::Ctl(m) => m.encode().len() as u64,
            SimMsg::Finished | SimMsg::Die | SimMsg::Over => 0,
        }
    }
}

struct Envelope {
    from: usize,
    seq: u64,
    msg: SimMsg,
}

/// What woke an actor.
pub(super) enum Wake {
    Msg(usize, SimMsg),
    /// A tracked send finished.
    Sent,
    Timeout,
}

/// The simulated time in nanoseconds, as the sans-IO machines count it.
pub(super) fn now_ns() -> u64 {
    (now() * 1e9).round() as u64
}

/// An actor's end of the network: `me` among `peers` (every actor's mailbox, by id).
pub(super) struct Port {
    me: usize,
    peers: Vec<Mailbox>,
    receiving: Option<Comm>,
    /// Sends whose end matters (a component leaving the NIC's queue).
    tracked: Vec<Comm>,
    /// Control messages under way. They are waited for with the rest, only so that SimGrid
    /// forgets them: SimGrid 3.32 keeps every detached transfer in one list and pays its
    /// length to take each out, which made a DFS interval's I × C reports and proposals cost
    /// time quadratic in their number.
    control: Vec<Comm>,
    /// Messages sent, per receiver, and handed over, per sender.
    sent: Vec<u64>,
    delivered: Vec<u64>,
}

/// The mailbox name of actor `id`.
pub(super) fn mailbox_name(id: usize) -> String {
    format!("actor-{id}")
}

impl Port {
    /// Opens actor `me`'s port among `actors` actors; call from the actor itself.
    pub(super) fn open(me: usize, actors: usize) -> Result<Port> {
        Mailbox::receive_eagerly(&mailbox_name(me))?;
        let peers = (0..actors).map(|id| Mailbox::by_name(&mailbox_name(id))).collect::<Result<Vec<_>>>()?;
        let receiving = Some(peers[me].get_async());
        Ok(Port {
            me,
            peers,
            receiving,
            tracked: Vec::new(),
            control: Vec::new(),
            sent: vec![0; actors],
            delivered: vec![0; actors],
        })
    }

    fn envelope(&mut self, to: usize, msg: SimMsg) -> (Envelope, u64) {
        let seq = self.sent[to];
        self.sent[to] += 1;
        let size = msg.size();
        (Envelope { from: self.me, seq, msg }, size)
    }

    /// Sends without waiting for it (`next` takes its end in passing; see `flush`).
    pub(super) fn send(&mut self, to: usize, msg: SimMsg) {
        let (e, size) = self.envelope(to, msg);
        let comm = self.peers[to].put_async(e, size);
        self.control.push(comm);
    }

    /// Waits until every message sent has arrived (an actor that ended first would take its
    /// transfers still under way with it) or failed: one to an actor that has ended is lost,
    /// as on a closed connection.
    pub(super) fn flush(&mut self) {
        for comm in self.control.drain(..) {
            let _ = comm.wait();
        }
    }

    /// Sends, counting the transfer as in flight until it ends.
    pub(super) fn send_tracked(&mut self, to: usize, msg: SimMsg) {
        let (e, size) = self.envelope(to, msg);
        let comm = self.peers[to].put_async(e, size);
        self.tracked.push(comm);
    }

    /// Tracked sends not yet ended.
    pub(super) fn in_flight(&self) -> usize {
        self.tracked.len()
    }

    /// The next message; or a tracked send's end; or nothing within
    /// `timeout` simulated seconds. While sends are in flight it waits for one of them or a
    /// message, with no timeout (SimGrid cannot time out a wait for any of several), so a
    /// deadline may pass by the rest of a transfer (for control messages, their latency);
    /// with none in flight it keeps to it.
    pub(super) fn next(&mut self, timeout: f64) -> Result<Wake> {
        let deadline = now() + timeout.max(0.0);
        loop {
            let receiving = self.receiving.take().expect("a receive is always posted");
            let done = if self.tracked.is_empty() && self.control.is_empty() {
                match receiving.wait_timeout(deadline - now()) {
                    Ok(done) => done,
                    Err(still) => {
                        self.receiving = Some(still);
                        return Ok(Wake::Timeout);
                    }
                }
            } else {
                // The tracked sends, the control messages, then the receive.
                let (sends, controls) = (self.tracked.len(), self.control.len());
                let mut comms = std::mem::take(&mut self.tracked);
                comms.append(&mut self.control);
                comms.push(receiving);
                let (i, done) = Comm::wait_any(&mut comms).expect("comms to wait for");
                if i == sends + controls {
                    self.control = comms.split_off(sends);
                    self.tracked = comms;
                    done
                } else {
                    self.receiving = comms.pop();
                    let at = if i < sends { sends - 1 } else { sends };
                    self.control = comms.split_off(at);
                    self.tracked = comms;
                    if i < sends {
                        return Ok(Wake::Sent);
                    }
                    continue;
                }
            };
            self.receiving = Some(self.peers[self.me].get_async());
            // A transfer that failed brings nothing: wait for the next.
            let Ok(Envelope { from, seq, msg }) = done.value::<Envelope>() else { continue };
            if seq != self.delivered[from] {
                return Err(Violation::OutOfOrder { from, seq, expected: self.delivered[from] }.into());
            }
            self.delivered[from] += 1;
            return Ok(Wake::Msg(from, msg));
        }
    }

    /// A node that ended (or was turned off): takes whatever arrives, unread, until the run is
    /// over (every node ends: one whose peers all fall silent fails after the timeout).
    pub(super) fn drain_until_over(&mut self) -> Result<()> {
        loop {
            if let Wake::Msg(_, SimMsg::Over) = self.next(FOREVER)? {
                return Ok(());
            }
        }
    }
}
