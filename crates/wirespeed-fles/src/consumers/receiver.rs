//! Our own consumer of FLESnet's interface, as `fles::TimesliceReceiver` is theirs: it
//! registers with a node's distributor at `ipc://@NAME`, takes one timeslice at a time as a
//! view into the node's shared memory, and completes it when the view drops.

use std::io::{Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::distributor::{ItemId, Registration};
use super::segment::Segment;
use super::work_item::WorkItem;
use super::zmtp::{Parts, SocketType, Zmtp, message_bytes};
use crate::error::{FlesError, Lost, Result, Violation, malformed};
use crate::model::{ComponentView, TimesliceDescriptor};

/// FLESnet's worker gives up on a distributor it has not heard from for this long.
pub const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(10);
/// Work items are a few bytes per component.
const MAX_ITEM: usize = 16 << 20;

/// A consumer attached to one compute node.
pub struct TimesliceReceiver {
    name: String,
    registration: Registration,
    conn: UnixStream,
    zmtp: Zmtp,
    segment: Option<Arc<Segment>>,
    /// The item whose view is out, to complete before the next.
    held: Option<ItemId>,
    ended: bool,
}

/// One timeslice, viewed where the node keeps it, until the next is taken.
pub struct TimesliceView<'a> {
    /// FLESnet's descriptor of the timeslice.
    pub descriptor: TimesliceDescriptor,
    components: Vec<ComponentView<'a>>,
}

impl TimesliceView<'_> {
    /// The timeslice's index.
    pub fn index(&self) -> u64 {
        self.descriptor.index
    }

    /// Its components, in input order, viewed in the node's segment.
    pub fn components(&self) -> &[ComponentView<'_>] {
        &self.components
    }
}

/// A timeslice taken: where each component lies in the node's segment (checked to lie inside
/// it), its size and its microslice count.
pub struct Taken {
    /// FLESnet's descriptor of the timeslice.
    pub descriptor: TimesliceDescriptor,
    /// The segment its components lie in, kept mapped while this lives.
    pub segment: Arc<Segment>,
    /// Each component's (offset in the segment, size, microslice count).
    pub components: Vec<(i64, u64, u64)>,
}

impl Taken {
    /// Component `c`'s bytes; see [`TimesliceReceiver::take`] for how long they hold still.
    pub fn bytes(&self, c: usize) -> &[u8] {
        let (handle, size, _) = self.components[c];
        self.segment.bytes(handle, size).expect("checked when taken")
    }
}

fn net(what: &str, e: std::io::Error) -> FlesError {
    crate::error::io(what, e)
}

impl TimesliceReceiver {
    /// Attaches to the node publishing as `name` (`--output shm:NAME`), wanting the items
    /// `registration` names; waits up to `wait` for the node to appear, as FLESnet's workers
    /// wait for theirs.
    pub fn connect(name: &str, registration: Registration, wait: Duration) -> Result<TimesliceReceiver> {
        let deadline = Instant::now() + wait;
        let (conn, zmtp) = loop {
            match open(name, &registration) {
                // Not there yet (refused), or going and coming back.
                Err(FlesError::Io { .. } | FlesError::Lost(Lost::Node { .. })) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                other => break other?,
            }
        };
        Ok(TimesliceReceiver { name: name.into(), registration, conn, zmtp, segment: None, held: None, ended: false })
    }

    /// The next timeslice (completing the one before), or None once the node has ended the
    /// stream. A node silent for [`HEARTBEAT_TIMEOUT`] or gone is an error.
    pub fn get(&mut self) -> Result<Option<TimesliceView<'_>>> {
        // SAFETY: the views borrow the receiver, so none is read after the next take.
        let Some(taken) = (unsafe { self.take() })? else { return Ok(None) };
        let mut components = Vec::with_capacity(taken.components.len());
        for (c, &(_, _, count)) in taken.components.iter().enumerate() {
            let bytes = taken.bytes(c);
            // SAFETY: `self.segment` keeps the mapping (the same segment) while the views
            // borrow the receiver; a new segment replaces it only in `take`, which needs the
            // receiver exclusively.
            let bytes: &[u8] = unsafe { std::slice::from_raw_parts(bytes.as_ptr(), bytes.len()) };
            components.push(ComponentView::new(bytes, count)?);
        }
        Ok(Some(TimesliceView { descriptor: taken.descriptor, components }))
    }

    /// The next timeslice, completing the one before, or None at the end of the stream.
    ///
    /// # Safety
    /// Once the next is taken, the node may write over this one's bytes: read none of them
    /// after that.
    pub unsafe fn take(&mut self) -> Result<Option<Taken>> {
        if self.ended {
            return Ok(None);
        }
        if let Some(id) = self.held.take() {
            self.send(&format!("COMPLETE {id}"))?;
        }
        loop {
            let parts = self.receive()?;
            let text = parts.first().map(|p| String::from_utf8_lossy(p).into_owned()).unwrap_or_default();
            if let Some(id) = text.strip_prefix("WORK_ITEM ") {
                let id = id.trim().parse::<ItemId>().map_err(|_| malformed("work item", text.clone()))?;
                let item = WorkItem::decode(parts.get(1).map_or(&[][..], Vec::as_slice))?;
                self.held = Some(id);
                return self.locate(item).map(Some);
            } else if text == "HEARTBEAT" {
                self.send("HEARTBEAT")?;
            } else if text == "DISCONNECT END" {
                self.ended = true;
                return Ok(None);
            } else if text == "DISCONNECT" {
                // As FLESnet's worker does: a new connection, registered anew.
                (self.conn, self.zmtp) = open(&self.name, &self.registration)?;
            } else {
                return Err(Violation::Zmtp(format!("the distributor sent {text:?}")).into());
            }
        }
    }

    /// Opens the item's segment (unless it is the one open) and checks where its components lie.
    fn locate(&mut self, item: WorkItem) -> Result<Taken> {
        if self.segment.as_ref().is_none_or(|s| s.uuid != item.shm_uuid) {
            let segment = Segment::open_read_only(&item.shm_name)?;
            if segment.uuid != item.shm_uuid {
                return Err(Violation::WrongSegment { segment: item.shm_name }.into());
            }
            self.segment = Some(segment);
        }
        let segment = self.segment.clone().expect("opened above");
        let mut components = Vec::with_capacity(item.data.len());
        for (&handle, c) in item.data.iter().zip(&item.components) {
            if segment.bytes(handle, c.size).is_none() {
                return Err(malformed("work item", "a component outside the segment"));
            }
            components.push((handle, c.size, c.num_microslices));
        }
        Ok(Taken { descriptor: item.descriptor, segment, components })
    }

    fn send(&mut self, text: &str) -> Result<()> {
        self.conn.write_all(&message_bytes(&[text.as_bytes()])).map_err(|e| self.lost("writing to the distributor", e))
    }

    /// A failed read or write: a node that went away says so.
    fn lost(&self, what: &str, e: std::io::Error) -> FlesError {
        match e.kind() {
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset => {
                Lost::Node { name: self.name.clone() }.into()
            }
            _ => net(what, e),
        }
    }

    /// The next message. The socket's read timeout (set once, in `open`) is the heartbeat
    /// timeout: a node that sends nothing for that long, heartbeats included, is given up.
    fn receive(&mut self) -> Result<Parts> {
        let mut buf = [0u8; 16 << 10];
        loop {
            if let Some(m) = self.zmtp.message() {
                return Ok(m);
            }
            match self.conn.read(&mut buf) {
                Ok(0) => return Err(Lost::Node { name: self.name.clone() }.into()),
                Ok(n) => self.zmtp.receive(&buf[..n])?,
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    return Err(Lost::NodeSilent { name: self.name.clone(), silent: HEARTBEAT_TIMEOUT }.into());
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.lost("reading from the distributor", e)),
            }
            let out = self.zmtp.transmit();
            if !out.is_empty() {
                self.conn.write_all(&out).map_err(|e| self.lost("writing to the distributor", e))?;
            }
        }
    }
}

/// Connects, greets and registers.
fn open(name: &str, registration: &Registration) -> Result<(UnixStream, Zmtp)> {
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).map_err(|e| net("naming the socket", e))?;
    let mut conn = UnixStream::connect_addr(&addr).map_err(|e| net(&format!("connecting to ipc://@{name}"), e))?;
    let mut zmtp = Zmtp::new(SocketType::Req, MAX_ITEM);
    conn.set_read_timeout(Some(HEARTBEAT_TIMEOUT)).map_err(|e| net("setting a timeout", e))?;
    let mut buf = [0u8; 4096];
    while !zmtp.is_open() {
        conn.write_all(&zmtp.transmit()).map_err(|e| net("greeting the distributor", e))?;
        let n = conn.read(&mut buf).map_err(|e| net("greeting the distributor", e))?;
        if n == 0 {
            return Err(Lost::Node { name: name.into() }.into());
        }
        zmtp.receive(&buf[..n])?;
    }
    conn.write_all(&zmtp.transmit()).map_err(|e| net("greeting the distributor", e))?;
    conn.write_all(&message_bytes(&[registration.message().as_bytes()])).map_err(|e| net("registering", e))?;
    Ok((conn, zmtp))
}
