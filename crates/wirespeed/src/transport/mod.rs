//! Transports: one connection and stream API over pluggable fabrics. Each backend only moves
//! frames (`FrameRx`, `FrameTx`); streams, credits and errors live in the shared engine.

mod conn;
#[cfg(feature = "gpu")]
mod device_region;
mod engine;
mod handshake;
#[doc(hidden)]
pub mod in_process;
mod listener;
#[cfg(feature = "ofi")]
#[doc(hidden)]
pub mod ofi;
#[cfg(any(feature = "ucx", feature = "ofi"))]
mod pool;
#[cfg(any(feature = "ucx", feature = "ofi"))]
mod progress;
mod rma;
#[doc(hidden)]
pub mod shm;
mod stream;
mod sys;
#[doc(hidden)]
pub mod tcp;
#[cfg(feature = "ucx")]
#[doc(hidden)]
pub mod ucx;

use std::io::IoSlice;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;

pub use crate::proto::session::Ready;
pub use conn::Connection;
#[cfg(feature = "gpu")]
pub use device_region::DeviceRegion;
pub use listener::Listener;
#[cfg(any(feature = "ucx", feature = "ofi"))]
pub use progress::wait_for_closing;
pub use rma::{LentMemory, Region, RemoteRegion};
pub use stream::{Incoming, Message, Stream};

use crate::error::Result;

/// Without UCX or libfabric no connection lingers after its close: nothing to wait for.
#[cfg(not(any(feature = "ucx", feature = "ofi")))]
pub fn wait_for_closing() {}
use crate::fabric::Fabric;
use crate::key::Key;
use crate::mem::{Buf, RegionMem};
use crate::proto::frame::{FrameHeader, Limits};
use crate::url::Endpoint;

/// Tunables shared by every transport.
#[derive(Clone, Debug)]
pub struct Config {
    /// The longest any single wait may last (credit, data, ring space, a write).
    pub timeout: Duration,
    /// The longest a handshake may take; a silent peer is dropped after it.
    pub handshake_timeout: Duration,
    /// Credit, in bytes, granted to the peer on each stream.
    pub stream_window: u64,
    /// Most concurrent streams accepted from the peer.
    pub max_streams: u32,
    /// Size limits on received frames.
    pub limits: Limits,
    /// Largest body chunk per frame, so streams interleave fairly.
    pub max_chunk: usize,
    /// Bytes in each shared-memory ring (one per direction); a power of two. An in-process
    /// pair queues as many each way.
    pub shm_ring_bytes: usize,
    /// Areas of that size each shared-memory ring may move between, so a receiver keeps
    /// views of that many rings' worth without a copy (address space until used; 1 to 64).
    pub shm_ring_areas: u32,
    /// TCP send and receive buffer sizes; 0 leaves the kernel's autotuning alone.
    pub tcp_buffer_bytes: usize,
    /// How long a shared-memory wait polls before it sleeps: latency for a core to spare.
    /// Zero where every core is busy moving data (timeslice building), so that no waiter
    /// takes a core from the copies.
    pub shm_spin: Duration,
    /// How long a peer's host may leave our kernel's probes or sent bytes unanswered before
    /// the connection fails: a host that vanished, or a link that went down. A peer whose
    /// kernel answers is alive, however long its program pauses (slow is not dead). Whole
    /// seconds, at least 1; the default is 90 s, or `WIRESPEED_PEER_TIMEOUT` seconds.
    pub peer_timeout: Duration,
}

/// The environment variable that sets [`Config::peer_timeout`]'s default, in seconds.
pub const PEER_TIMEOUT_ENV: &str = "WIRESPEED_PEER_TIMEOUT";

fn default_peer_timeout() -> Duration {
    let secs = std::env::var(PEER_TIMEOUT_ENV).ok().and_then(|v| v.trim().parse::<u64>().ok());
    Duration::from_secs(secs.unwrap_or(90).max(1))
}

impl Default for Config {
    fn default() -> Self {
        Config {
            timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(10),
            stream_window: 16 << 20,
            max_streams: 1024,
            limits: Limits::default(),
            max_chunk: 1 << 20,
            shm_ring_bytes: 16 << 20,
            shm_ring_areas: 8,
            tcp_buffer_bytes: 4 << 20,
            shm_spin: Duration::from_micros(50),
            peer_timeout: default_peer_timeout(),
        }
    }
}

/// Connects to `url` and authenticates with `key`.
pub fn connect(url: &str, key: &Key, config: &Config) -> Result<Connection> {
    let Endpoint { fabric, address } = Endpoint::parse(url)?;
    match fabric {
        Fabric::Tcp => tcp::connect(&address, key, config),
        Fabric::Shm => shm::connect(Path::new(&address), key, config),
        #[cfg(feature = "ucx")]
        Fabric::Ucx => ucx::connect(&address, key, config),
        #[cfg(not(feature = "ucx"))]
        Fabric::Ucx => Err(no_ucx()),
        #[cfg(feature = "ofi")]
        Fabric::Ofi(p) => ofi::connect(p, &address, key, config),
        #[cfg(not(feature = "ofi"))]
        Fabric::Ofi(_) => Err(no_ofi()),
        Fabric::InProcess => Err(in_process_url(url)),
    }
}

/// Listens on `url`; [`Listener::accept`] yields authenticated connections.
pub fn listen(url: &str, key: &Key, config: &Config) -> Result<Listener> {
    let Endpoint { fabric, address } = Endpoint::parse(url)?;
    match fabric {
        Fabric::Tcp => tcp::listen(&address, key, config),
        Fabric::Shm => shm::listen(Path::new(&address), key, config),
        #[cfg(feature = "ucx")]
        Fabric::Ucx => ucx::listen(&address, key, config),
        #[cfg(not(feature = "ucx"))]
        Fabric::Ucx => Err(no_ucx()),
        #[cfg(feature = "ofi")]
        Fabric::Ofi(p) => ofi::listen(p, &address, key, config),
        #[cfg(not(feature = "ofi"))]
        Fabric::Ofi(_) => Err(no_ofi()),
        Fabric::InProcess => Err(in_process_url(url)),
    }
}

fn in_process_url(url: &str) -> crate::error::Error {
    crate::error::Error::Url { url: url.into(), reason: "no URL names an in-process pair".into() }
}

#[cfg(not(feature = "ucx"))]
fn no_ucx() -> crate::error::Error {
    crate::error::Error::Fabric { op: "ucx://", status: "this build has no UCX support (feature \"ucx\")".into() }
}

/// A backend whose fabric moves bytes one-sidedly.
pub(crate) trait NativeRma: Send + Sync {
    /// Allocates `len` zeroed bytes registered with the fabric (where it can reach them
    /// fastest: shared memory a peer on the same host maps, say), and the access information
    /// a peer needs. Dropping the memory revokes access and frees it.
    fn register(&self, len: usize) -> Result<(RegionMem, Vec<u8>)>;
    /// Registers memory the caller keeps: what keeps the registration (dropped before the
    /// memory) and the access information a peer needs.
    fn lend(&self, mem: &LentMemory) -> Result<(Box<dyn std::any::Any + Send + Sync>, Vec<u8>)>;
    /// Makes a peer's access information usable on this connection.
    fn remote(&self, native: &[u8]) -> Result<Box<dyn NativeRemote>>;
    /// Lends the peer GPU memory: the access information it needs, and what keeps the
    /// fabric's registration (dropped before the memory). Fabrics that cannot write device
    /// memory say so.
    #[cfg(feature = "gpu")]
    fn register_device(
        &self,
        _mem: &crate::gpu::DeviceBuffer,
    ) -> Result<(Box<dyn std::any::Any + Send + Sync>, Vec<u8>)> {
        Err(crate::error::Error::Fabric { op: "lending GPU memory", status: "this fabric cannot write it".into() })
    }
}

/// A peer's region as the fabric reaches it. Offsets are checked before these are called.
pub(crate) trait NativeRemote: Send + Sync {
    /// Returns once the bytes are in the peer's memory.
    fn put(&self, offset: u64, data: &[u8], timeout: Duration) -> Result<()>;
    fn get(&self, offset: u64, out: &mut [u8], timeout: Duration) -> Result<()>;
    /// The GPU that this process's own copies write the region on (lent by CUDA IPC), so that
    /// a sender can page-lock what it puts from; None where the fabric moves the bytes.
    #[cfg(feature = "gpu")]
    fn copied_by(&self) -> Option<crate::gpu::Gpu> {
        None
    }
}

/// Writes a frame's payload in place (see [`FrameTx::write_frame_filled`]).
pub(crate) type Fill<'a> = dyn FnMut(&mut [u8]) -> std::io::Result<()> + 'a;

/// Takes one received frame: its header, meta, and payload.
pub(crate) type FrameSink<'a> = dyn FnMut(&FrameHeader, &[u8], Buf) -> Result<()> + 'a;

/// Receiving half of a backend: yields whole frames.
pub(crate) trait FrameRx: Send {
    /// Reads one frame and hands it to `sink`; `Ok(false)` if `deadline` passed first.
    /// A partly read frame is kept for the next call.
    fn read_frame(&mut self, deadline: Instant, sink: &mut FrameSink<'_>) -> Result<bool>;

    /// Bodies larger than this are gathered onto the heap rather than held as lent views.
    fn zero_copy_limit(&self) -> u64 {
        u64::MAX
    }
}

/// Sending half of a backend.
pub(crate) trait FrameTx: Send {
    /// Writes one frame: `head` is the encoded header plus meta, `payload` the body bytes.
    /// Blocking for room lasts at most `timeout`.
    fn write_frame(&mut self, head: &[u8], payload: &[IoSlice<'_>], timeout: Duration) -> Result<()>;

    /// Writes one frame whose payload the backend may keep (reference counted) and send
    /// later, so frames can be in flight together. Backends that copy anyway write at once.
    fn write_frame_owned(&mut self, head: &[u8], payload: &[Bytes], timeout: Duration) -> Result<()> {
        let slices: Vec<IoSlice<'_>> = payload.iter().map(|b| IoSlice::new(b)).collect();
        self.write_frame(head, &slices, timeout)
    }

    /// True when the backend's frames lie in memory the peer reads (shared memory), which
    /// [`FrameTx::write_frame_filled`] lets a sender fill in place.
    fn fills_in_place(&self) -> bool {
        false
    }

    /// Writes one frame whose `len` payload bytes `fill` writes straight into the peer's
    /// memory, saving the copy from a staging buffer. If `fill` fails, nothing is written and
    /// its error comes back inside. Only called when [`FrameTx::fills_in_place`].
    fn write_frame_filled(
        &mut self,
        _head: &[u8],
        _len: usize,
        _fill: &mut Fill<'_>,
        _timeout: Duration,
    ) -> Result<std::io::Result<()>> {
        Err(crate::error::Error::Usage("this transport cannot fill frames in place"))
    }

    /// Largest payload this backend takes in one frame.
    fn max_payload(&self) -> usize;

    /// Ends the connection. Graceful: everything written still arrives (TCP sends FIN after
    /// it); otherwise both directions stop at once, waking a reader blocked on them.
    fn shutdown(&mut self, graceful: bool);
}

#[cfg(not(feature = "ofi"))]
fn no_ofi() -> crate::error::Error {
    crate::error::Error::Fabric {
        op: "ofi+<provider>://",
        status: "this build has no libfabric support (feature \"ofi\")".into(),
    }
}
