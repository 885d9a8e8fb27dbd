//! What can go wrong building timeslices, as a library reports it: typed, so that a caller
//! tells a peer that broke the protocol ([`Violation`]) from a connection that failed (with
//! the core's error, a timeout or a reset, kept as its source) from peers that are gone
//! ([`Lost`]).

use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;

/// Everything timeslice building can fail with. [`FlesError::class`] says what kind of failure it is.
#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum FlesError {
    /// Bytes that do not hold what FLESnet's formats say they should.
    #[error("malformed {what}: {why}")]
    Malformed {
        /// What the bytes were to hold.
        what: &'static str,
        /// What is wrong with them.
        why: String,
    },
    /// A microslice whose content does not match the CRC its descriptor gives.
    #[error("microslice {idx} of input {input}: CRC-32C {found:#010x}, the descriptor says {expected:#010x}")]
    Crc {
        /// The input (component) it came from.
        input: u16,
        /// Its index.
        idx: u64,
        /// The CRC its descriptor gives.
        expected: u32,
        /// The CRC of its content.
        found: u32,
    },
    /// A microslice of FLESnet's test pattern whose content departs from it.
    #[error("microslice {idx}: not FLESnet's ramp pattern: {why}")]
    Pattern {
        /// Its index.
        idx: u64,
        /// Where and how it departs.
        why: String,
    },
    /// A setting that cannot work (zero compute nodes, a ring smaller than one component).
    #[error("{0}")]
    Config(String),
    /// A peer broke the protocol.
    #[error("{0}")]
    Peer(#[from] Violation),
    /// A wirespeed connection failed while doing `what`.
    #[error("{what}: {source}")]
    Connection {
        /// What the node was doing.
        what: String,
        /// The connection's error.
        source: wirespeed::Error,
    },
    /// Peers this node needs are gone, or silent past every allowance.
    #[error("{0}")]
    Lost(#[from] Lost),
    /// A local socket, pipe or thread failed while doing `what` (FLESnet's ipc interface,
    /// standard input and output, a thread that would not start).
    #[error("{what}: {source}")]
    Io {
        /// What the node was doing.
        what: String,
        /// The system's error.
        source: Arc<std::io::Error>,
    },
    /// The barrier's word never came: the run ended before it started.
    #[error("the run was called off before it started")]
    CalledOff,
    /// GPU memory: no GPU, a driver call that failed, a kernel that did not compile.
    #[cfg(feature = "gpu")]
    #[error(transparent)]
    Gpu(#[from] wirespeed::gpu::GpuError),
    /// FLESnet's shared-memory interface: segment `segment` could not be made or opened
    /// (`op`), for the reason the system or Boost gives.
    #[error("shared memory: {op} {segment}: {why}")]
    Shm {
        /// What failed: making, opening, mapping.
        op: &'static str,
        /// The segment's name.
        segment: String,
        /// The reason the system or Boost gives.
        why: String,
    },
    /// An archive, or a file to replay, that holds none of what a run needs (`holds`:
    /// "timeslices", "microslices").
    #[error("{path} holds no {holds} to replay")]
    NothingToReplay {
        /// The file.
        path: String,
        /// What it lacks.
        holds: &'static str,
    },
    /// Writing Arrow IPC.
    #[error("Arrow: {0}")]
    Arrow(Arc<arrow_schema::ArrowError>),
    /// An actor of a simulation (`actor`: its number) failed.
    #[error("simulation: actor {actor}: {error}")]
    Simulation {
        /// The actor's number.
        actor: usize,
        /// Its failure.
        error: Box<FlesError>,
    },
    /// A thread of this process failed: a bug here, nothing a peer did.
    #[error("internal error: {0}")]
    Internal(&'static str),
}

impl FlesError {
    /// What kind of failure this is.
    pub fn class(&self) -> wirespeed::Class {
        use wirespeed::Class;
        match self {
            FlesError::Malformed { .. } | FlesError::Peer(_) => Class::Protocol,
            FlesError::Crc { .. } | FlesError::Pattern { .. } => Class::Checksum,
            FlesError::Config(_) | FlesError::NothingToReplay { .. } => Class::Usage,
            FlesError::Connection { source, .. } => source.class(),
            FlesError::Lost(_) | FlesError::CalledOff => Class::Connection,
            FlesError::Io { source, .. } => Class::of_io(source.kind()),
            #[cfg(feature = "gpu")]
            FlesError::Gpu(_) => Class::Gpu,
            FlesError::Shm { .. } | FlesError::Arrow(_) => Class::Io,
            FlesError::Simulation { error, .. } => error.class(),
            FlesError::Internal(_) => Class::Failure,
        }
    }
}

/// Which side of a run a peer is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// An input node: it sends its components.
    Input,
    /// A compute node: it builds timeslices from every input's components.
    ComputeNode,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Input => "input",
            Role::ComputeNode => "compute node",
        })
    }
}

/// What a peer did wrong.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Violation {
    /// A message from a peer the run does not have.
    #[error("a message from {role} {index}, of {count}")]
    NoSuchPeer {
        /// Which side the sender claims to be.
        role: Role,
        /// Its index there.
        index: usize,
        /// How many there are.
        count: usize,
    },
    /// A message the peer may not send (at all, or now).
    #[error("{role} {index} sent {message}")]
    Unexpected {
        /// Which side the sender is on.
        role: Role,
        /// Its index there.
        index: usize,
        /// What it sent.
        message: String,
    },
    /// A rule of the protocol broken: ring pointers that go back, a timeslice that is not the
    /// receiver's, a horizon behind what was sent.
    #[error("{role} {index}: {rule}")]
    Broke {
        /// Which side the sender is on.
        role: Role,
        /// Its index there.
        index: usize,
        /// The rule, in words.
        rule: String,
    },
    /// The compute nodes' agreed end lies before a timeslice this input already sent.
    #[error("the run ends at {end}, but timeslice {sent} is sent")]
    EndBehindSent {
        /// The timeslice the run ends at.
        end: u64,
        /// A timeslice already sent.
        sent: u64,
    },
    /// The connection closed before setup finished.
    #[error("the peer closed the connection during setup")]
    ClosedDuringSetup,
    /// A compute node that never sent its rings' layout.
    #[error("{url} did not answer with its rings")]
    NoRings {
        /// The compute node's URL.
        url: String,
    },
    /// An input that connected without saying which it is.
    #[error("an input did not say which it is")]
    Unidentified,
    /// An input that joined twice, or whose index is out of range.
    #[error("input {input} joined twice or is not one of {inputs}")]
    JoinedTwice {
        /// The input's index.
        input: usize,
        /// How many inputs the run has.
        inputs: usize,
    },
    /// A ZeroMQ peer (FLESnet's consumers' side) that broke ZMTP or the item protocol.
    #[error("ZeroMQ peer: {0}")]
    Zmtp(String),
    /// A work item that names a segment whose UUID is not the one it gives.
    #[error("{segment} is not the segment the item names (UUIDs differ)")]
    WrongSegment {
        /// The segment the item names.
        segment: String,
    },
    /// An actor of a simulation sent what its receiver never takes (`message`: what it was).
    #[error("actor {from} sent {to} {message}")]
    ActorSent {
        /// The sender's number.
        from: usize,
        /// What received it.
        to: &'static str,
        /// What it sent.
        message: String,
    },
    /// A simulated link delivered actor `from`'s message `seq` before message `expected`.
    #[error("message {seq} from actor {from} came before message {expected}")]
    OutOfOrder {
        /// The sender's number.
        from: usize,
        /// The message's sequence number.
        seq: u64,
        /// The one due first.
        expected: u64,
    },
}

/// Peers that are gone.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Lost {
    /// Every input has gone: no timeslice can be completed.
    #[error("every input is gone")]
    EveryInput,
    /// Every compute node has gone: no timeslice can be placed.
    #[error("every compute node is gone")]
    EveryComputeNode,
    /// An input gave this compute node up (it took it for dead).
    #[error("input {input} gave this compute node up")]
    GivenUpBy {
        /// The input.
        input: usize,
    },
    /// Two compute nodes lost at once, whose finished timeslices cannot be told apart.
    #[error("compute nodes {first} and {second} were lost at once: what each finished cannot be told apart")]
    TwoAtOnce {
        /// One lost compute node.
        first: usize,
        /// The other.
        second: usize,
    },
    /// Nothing from any peer for the whole timeout.
    #[error("nothing from any {peers} for {silent:?}")]
    AllSilent {
        /// Which side fell silent.
        peers: Role,
        /// For how long.
        silent: Duration,
    },
    /// The node a consumer is attached to (`ipc://@name`) went away or fell silent.
    #[error("ipc://@{name}: the node went away")]
    Node {
        /// The node's name.
        name: String,
    },
    /// The node a consumer is attached to fell silent.
    #[error("ipc://@{name}: no word from the node for {silent:?}")]
    NodeSilent {
        /// The node's name.
        name: String,
        /// For how long.
        silent: Duration,
    },
    /// Too few consumers registered in time.
    #[error("{registered} of {wanted} consumers registered at ipc://@{name} within {timeout:?}")]
    TooFewConsumers {
        /// Consumers that registered.
        registered: usize,
        /// Consumers the run waits for.
        wanted: usize,
        /// The interface's name.
        name: String,
        /// How long it waited.
        timeout: Duration,
    },
    /// Frame memory: the consumer kept every frame past the patience.
    #[error("no frame came back for {patience:?}: the consumer holds all {frames}")]
    NoFrameBack {
        /// How long it waited.
        patience: Duration,
        /// The frames the consumer holds.
        frames: usize,
    },
    /// The compute node's thread panicked: a bug here.
    #[error("the compute node's thread panicked")]
    ThreadPanicked,
}

/// The result of timeslice building.
pub type Result<T> = std::result::Result<T, FlesError>;

/// A message of ours that ends before its fields do.
impl From<wirespeed::proto::codec::Truncated> for FlesError {
    fn from(_: wirespeed::proto::codec::Truncated) -> Self {
        malformed("message", "truncated")
    }
}

pub(crate) fn malformed(what: &'static str, why: impl Into<String>) -> FlesError {
    FlesError::Malformed { what, why: why.into() }
}

/// A local failure while doing `what`.
pub(crate) fn io(what: impl Into<String>, e: std::io::Error) -> FlesError {
    FlesError::Io { what: what.into(), source: Arc::new(e) }
}

/// A connection's failure while doing `what`, the core's error kept whole.
pub(crate) fn connection(what: impl Into<String>, e: wirespeed::Error) -> FlesError {
    FlesError::Connection { what: what.into(), source: e }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connections_failure_keeps_the_cores_error_as_its_source() {
        let e = connection("receiving", wirespeed::Error::Timeout(Duration::from_secs(3)));
        assert_eq!(e.to_string(), "receiving: timed out after 3s");
        let source = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<wirespeed::Error>());
        assert!(matches!(source, Some(wirespeed::Error::Timeout(_))), "{source:?}");
    }

    #[test]
    fn what_a_peer_did_wrong_is_a_value_to_match() {
        let e: FlesError = Violation::NoSuchPeer { role: Role::Input, index: 9, count: 2 }.into();
        assert_eq!(e.to_string(), "a message from input 9, of 2");
        assert!(matches!(e, FlesError::Peer(Violation::NoSuchPeer { index: 9, .. })));
        let lost: FlesError = Lost::AllSilent { peers: Role::ComputeNode, silent: Duration::from_secs(20) }.into();
        assert_eq!(lost.to_string(), "nothing from any compute node for 20s");
    }
}
