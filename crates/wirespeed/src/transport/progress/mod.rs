//! Waiting on a connection over a fabric that moves only when driven (UCX, libfabric), and
//! its progress thread. A waiting thread spins on progress for a bounded time, then parks; a
//! background progress thread then sleeps on the fabric's event fd and wakes it. The same
//! thread keeps rendezvous transfers moving while the application is busy elsewhere, and
//! watches the bootstrap socket, whose hang-up means the peer is gone.

mod lingering;

pub use lingering::wait_for_closing;

use std::io::{self, Read};
use std::net::TcpStream;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::eventfd::{EfdFlags, EventFd};

use crate::error::{Error, Result, Violation};
use crate::mem::Buf;
use crate::proto::frame::FrameHeader;
use crate::sync::Unpoison;
use crate::transport::{FrameRx, FrameSink};

/// How long a waiting thread drives progress itself after the last event before it parks.
const SPIN: Duration = Duration::from_micros(500);
/// Turns at progress between clock reads.
const CLOCK_EVERY: u32 = 32;
/// How long a waiting thread spins without an event before it starts yielding its CPU (once
/// every `CLOCK_EVERY` turns) until the next event or `SPIN` runs out. A spinning thread that
/// shares its CPU with the thread it waits for (the peer process, on a busy or small host)
/// would otherwise hold it for a whole time slice at a time, and the scheduler may take 100 ms
/// or more to move one of them: 128 KiB messages over cma ran at a fifth of their speed then.
/// Yielding at once, every few turns, costs the peer: a million yields a second at the sender
/// made the receiver's `process_vm_readv` slower, through the sender's task it looks up.
const YIELD_AFTER: Duration = Duration::from_micros(10);
/// How long, at least, the progress thread stays out of the way once it sees an application
/// thread driving; it takes over at a look that finds none drove since the last.
const HANDOVER: Duration = Duration::from_millis(2);
/// How long the progress thread sleeps, at most, while application threads keep driving: each
/// look that finds them still at it doubles its next sleep, from `HANDOVER` up to this. Waking
/// every `HANDOVER` would preempt a busy application thread 500 times a second.
const HANDOVER_MAX: Duration = Duration::from_millis(16);
/// How long the progress thread pauses after a pass that moved nothing while UCX still had
/// work: doubling from `STALL_BACKOFF_MIN / 2` each pass in a row, up to `MIN << (STEPS-1)`.
const STALL_BACKOFF_MIN: Duration = Duration::from_micros(20);
const STALL_BACKOFF_STEPS: u32 = 6;
/// Bounds on the looks (about a microsecond each) at a fabric whose progress is a system call
/// that find nothing before a waiting thread sleeps on its fds. Between them the budget
/// adapts: the most when spinning finds an event, doubled when one comes within
/// `FD_WAKE_COST` of a sleep, halved when spinning finds nothing. A ping-pong's answer
/// comes within some 50 looks, and a wake from `ppoll` costs about 30 µs; but spinning while
/// the peer waits for a CPU (a busy host) only delays it.
const FD_SPIN_MIN: u32 = 2;
const FD_SPIN_MAX: u32 = 64;
/// What waking from `ppoll` costs, about: an event sooner than this after a sleep began would
/// have been found more cheaply by spinning.
const FD_WAKE_COST: Duration = Duration::from_micros(50);
/// How long an application thread sleeps on the fabric's fds at most, where progress is a
/// system call: a wake it missed (another thread took its event) costs no more than this.
const FD_SLICE: Duration = Duration::from_millis(10);
/// The same while transfers are in flight, whose progress the fd does not always announce
/// (1 ms made timeslice building over ofi+tcp slower than spinning had been; 10 to 200 µs
/// all did about as well).
const FD_SLICE_BUSY: Duration = Duration::from_micros(50);
/// Bounds on how long the progress thread sleeps between looks at the worker.
const MIN_POLL: Duration = Duration::from_millis(1);
const MAX_POLL: Duration = Duration::from_secs(1);
/// The same bounds for a fabric with no event fd (libfabric's shm): it must be polled, often
/// while threads wait on it, and still every millisecond while it is quiet.
const MIN_POLL_NO_FD: Duration = Duration::from_micros(50);
const MAX_POLL_NO_FD: Duration = Duration::from_millis(1);

/// A fabric's per-connection state, driven under one lock: its progress, and what the
/// connection knows of its peer's liveness.
pub(crate) trait Driver: Send + 'static {
    /// Drives the fabric once; how many events that handled.
    fn progress(&mut self) -> u32;
    /// Arms the event fd; false if events are pending (progress again first).
    fn arm(&mut self) -> Result<bool>;
    /// Adds the fds that signal events once armed to `fds` (none: the fabric must be polled).
    /// Asked before each sleep, since a fabric's set may change.
    fn wait_fds(&mut self, fds: &mut Vec<libc::pollfd>) -> Result<()>;
    /// Transfers in flight: a send not yet complete, or a body still arriving.
    fn outstanding(&self) -> bool;
    /// Counts arrivals and failures: a change means something happened.
    fn events(&self) -> u64;
    fn failure(&self) -> Option<&Error>;
    /// Fails the connection (the first failure sticks).
    fn fail(&mut self, e: Error);
    /// The peer seemed to go; frames already on their way may still arrive for a while.
    fn peer_going(&mut self, why: String);
    /// Fails the connection once a peer that seemed to go has been given its grace.
    fn expire_peer_gone(&mut self);
    /// When that happens, if the peer seemed to go.
    fn give_up_at(&self) -> Option<Instant>;
    /// Takes the oldest arrival if it is complete: header, meta and payload.
    fn pop_frame(&mut self) -> Option<Result<(FrameHeader, Meta, Buf)>>;
    /// Whether each look at the fabric is a system call (libfabric's tcp: an `epoll_wait`),
    /// so that a waiting thread sleeps on the fabric's fds at once instead of spinning.
    fn progress_is_a_syscall(&self) -> bool {
        false
    }
}

/// A frame's meta as a driver hands it over; most fit inline.
pub(crate) type Meta = smallvec::SmallVec<[u8; 32]>;

/// The receiving half of a connection over a driven fabric: waits for the driver's next
/// complete arrival, driving progress meanwhile.
pub(crate) struct DrivenRx<Core: Driver> {
    pub(crate) h: Arc<Handle<Core>>,
}

impl<Core: Driver> FrameRx for DrivenRx<Core> {
    fn read_frame(&mut self, deadline: Instant, sink: &mut FrameSink<'_>) -> Result<bool> {
        match self.h.shared.wait(Some(deadline), true, |core| core.pop_frame())? {
            None => Ok(false),
            Some(frame) => {
                let (header, meta, payload) = frame?;
                sink(&header, &meta, payload)?;
                Ok(true)
            }
        }
    }
}

/// State shared by the connection's halves and its progress thread.
pub(crate) struct Shared<Core: Driver> {
    core: Mutex<Core>,
    wake: Condvar,
    /// Threads parked on `wake`.
    parked: AtomicUsize,
    /// Application threads asleep on the fabric's fds and `woken` (where progress is a system
    /// call), and the eventfd (a semaphore) that whoever progresses for them writes.
    fd_sleepers: AtomicUsize,
    woken: EventFd,
    /// Looks without an event before such a thread sleeps (see `FD_SPIN_MAX`).
    fd_spin: AtomicU32,
    /// Counts application threads' turns at driving progress (one per wait, and one per
    /// `CLOCK_EVERY` turns within it), so the progress thread can tell whether they still drive.
    app_turns: AtomicU64,
    /// Wakes the progress thread.
    kick: EventFd,
    kicked: AtomicBool,
    /// A `Run` as u8: whether the progress thread goes on.
    state: AtomicU8,
    sock: TcpStream,
}

/// Whether the progress thread goes on.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Run {
    Running = 0,
    /// The application is gone but the peer may still be reading what we sent: keep serving
    /// it until it hangs up, for at most `LINGER_LIMIT`.
    Lingering = 1,
    Stopping = 2,
}

impl Run {
    /// The state stored in `state` (as `Run as u8`).
    fn load(state: &AtomicU8) -> Run {
        match state.load(Ordering::SeqCst) {
            0 => Run::Running,
            1 => Run::Lingering,
            _ => Run::Stopping,
        }
    }
}

/// How long a closed connection keeps its worker for a peer still reading.
pub(crate) const LINGER_LIMIT: Duration = Duration::from_secs(5);

impl<Core: Driver> Shared<Core> {
    /// Wraps a connected `core`; `sock` is the authenticated bootstrap socket.
    fn new(core: Core, sock: TcpStream) -> Result<Arc<Self>> {
        let kick = EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
            .map_err(io::Error::from)?;
        let woken =
            EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_SEMAPHORE)
                .map_err(io::Error::from)?;
        sock.set_nonblocking(true)?;
        Ok(Arc::new(Shared {
            core: Mutex::new(core),
            wake: Condvar::new(),
            parked: AtomicUsize::new(0),
            fd_sleepers: AtomicUsize::new(0),
            woken,
            fd_spin: AtomicU32::new(FD_SPIN_MAX),
            app_turns: AtomicU64::new(0),
            kick,
            kicked: AtomicBool::new(false),
            state: AtomicU8::new(Run::Running as u8),
            sock,
        }))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unpoison()
    }

    /// Locks for an application thread about to drive (sending, say), which counts as a turn:
    /// the progress thread stays out of the way of a thread that keeps at it.
    #[cfg(feature = "ofi")]
    pub(crate) fn lock_driving(&self) -> MutexGuard<'_, Core> {
        self.app_turns.fetch_add(1, Ordering::Relaxed);
        self.lock()
    }

    /// Waits until `ready` yields something, `deadline` passes (`Ok(None)`), or, if
    /// `stop_on_failure`, the connection fails. Spins on progress first, then parks.
    pub(crate) fn wait<T>(
        &self,
        deadline: Option<Instant>,
        stop_on_failure: bool,
        mut ready: impl FnMut(&mut Core) -> Option<T>,
    ) -> Result<Option<T>> {
        self.app_turns.fetch_add(1, Ordering::Relaxed);
        let mut core = self.lock();
        // The clock is read only every few turns: a wait that progress answers at once (most
        // of them, under load) never reads it, and reading it costs more than a turn.
        let mut spin_end = None;
        let mut turns = 0u32;
        let mut idle_turns = 0u32;
        let mut slept_at: Option<Instant> = None;
        loop {
            if let Some(t) = ready(&mut core) {
                return Ok(Some(t));
            }
            core.expire_peer_gone();
            if stop_on_failure && let Some(e) = core.failure() {
                return Err(e.clone());
            }
            turns = turns.wrapping_add(1);
            if turns.is_multiple_of(CLOCK_EVERY) {
                self.app_turns.fetch_add(1, Ordering::Relaxed);
                let now = Instant::now();
                if deadline.is_some_and(|d| now >= d) {
                    return Ok(None);
                }
                let end = *spin_end.get_or_insert(now + SPIN);
                if end <= now {
                    self.parked.fetch_add(1, Ordering::SeqCst);
                    self.kick();
                    let slice = deadline.map_or(Duration::from_secs(1), |d| d.saturating_duration_since(now));
                    core = self.wake.wait_timeout(core, slice).unpoison().0;
                    self.parked.fetch_sub(1, Ordering::SeqCst);
                    spin_end = None;
                    continue;
                }
                if end - now <= SPIN - YIELD_AFTER {
                    // Nothing happened for YIELD_AFTER: let a thread that shares our CPU run.
                    drop(core);
                    std::thread::yield_now();
                    core = self.lock();
                    continue;
                }
            }
            if core.progress() > 0 {
                spin_end = None; // spin on for a whole SPIN after the last event
                match slept_at.take() {
                    // Spinning found the event: spin the longest next time.
                    None if idle_turns > 0 => self.fd_spin.store(FD_SPIN_MAX, Ordering::Relaxed),
                    // It came so soon after the sleep began that spinning on would have been
                    // cheaper than the wake: spin longer next time.
                    Some(at) if at.elapsed() < FD_WAKE_COST => {
                        let budget = self.fd_spin.load(Ordering::Relaxed);
                        self.fd_spin.store((budget * 2).min(FD_SPIN_MAX), Ordering::Relaxed);
                    }
                    _ => {}
                }
                idle_turns = 0;
                self.wake_waiters();
            } else {
                if core.progress_is_a_syscall() {
                    idle_turns += 1;
                    let budget = self.fd_spin.load(Ordering::Relaxed);
                    if idle_turns >= budget {
                        // Spinning found nothing this time: spin less next time.
                        self.fd_spin.store((budget / 2).max(FD_SPIN_MIN), Ordering::Relaxed);
                        slept_at = Some(Instant::now());
                        core = self.sleep_on_fabric(core, deadline);
                        idle_turns = 0;
                        continue;
                    }
                }
                drop(core);
                std::hint::spin_loop();
                core = self.lock();
            }
        }
    }

    /// Wakes the threads that wait for what progress just moved.
    fn wake_waiters(&self) {
        if self.parked.load(Ordering::SeqCst) > 0 {
            self.wake.notify_all();
        }
        let sleepers = self.fd_sleepers.load(Ordering::SeqCst);
        if sleepers > 0 {
            let _ = self.woken.write(sleepers as u64);
        }
    }

    /// Sleeps on the fabric's fds until an event, a wake from a thread that progressed, the
    /// deadline, or a slice that bounds how long a missed wake can cost. Nothing pending must
    /// be left unprogressed: the fabric is armed first, and progress runs again if it cannot be.
    fn sleep_on_fabric<'a>(
        &'a self,
        mut core: MutexGuard<'a, Core>,
        deadline: Option<Instant>,
    ) -> MutexGuard<'a, Core> {
        let mut fds = vec![libc::pollfd { fd: self.woken.as_fd().as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        match core.arm().and_then(|armed| if armed { core.wait_fds(&mut fds).map(|()| true) } else { Ok(false) }) {
            Ok(true) => {}
            Ok(false) => return core,
            Err(e) => {
                core.fail(e);
                self.wake_waiters();
                return core;
            }
        }
        let now = Instant::now();
        let slice = if core.outstanding() { FD_SLICE_BUSY } else { FD_SLICE };
        let mut until = deadline.map_or(now + slice, |d| d.min(now + slice));
        if let Some(t) = core.give_up_at() {
            until = until.min(t);
        }
        self.fd_sleepers.fetch_add(1, Ordering::SeqCst);
        self.app_turns.fetch_add(1, Ordering::Relaxed);
        drop(core);
        ppoll_until(&mut fds, until);
        if fds[0].revents & libc::POLLIN != 0 {
            let _ = self.woken.read();
        }
        self.fd_sleepers.fetch_sub(1, Ordering::SeqCst);
        self.lock()
    }

    /// Fails the connection: parked threads wake and see `e`.
    pub(crate) fn fail(&self, e: Error) {
        let mut core = self.lock();
        core.fail(e);
        self.wake.notify_all();
    }

    pub(crate) fn sock(&self) -> &TcpStream {
        &self.sock
    }

    fn kick(&self) {
        if !self.kicked.swap(true, Ordering::SeqCst) {
            let _ = self.kick.write(1);
        }
    }

    /// Ends the progress thread: at once, or (`linger`) once the peer hangs up.
    pub(crate) fn stop(&self, linger: bool) {
        let run = if linger { Run::Lingering } else { Run::Stopping };
        self.state.store(run as u8, Ordering::SeqCst);
        self.kick();
    }

    /// The progress thread: drives the worker whenever no application thread does, sleeping
    /// on the worker's event fd, the kick fd and the bootstrap socket.
    pub(crate) fn run_progress(&self) {
        let mut sock_open = true;
        let mut linger_end = None;
        let mut last_event = Instant::now();
        let mut seen_turns = self.app_turns.load(Ordering::Relaxed);
        let mut fabric_fds = Vec::new();
        let mut stay_out = HANDOVER;
        let mut stalled = 0;
        loop {
            let now = Instant::now();
            match Run::load(&self.state) {
                Run::Running => {}
                Run::Lingering if sock_open && now < *linger_end.get_or_insert(now + LINGER_LIMIT) => {}
                _ => return,
            }
            // Application threads count their turns at driving: any since our last look means
            // one is at it, so stay out of its way unless kicked.
            let turns = self.app_turns.load(Ordering::Relaxed);
            let app_driving = turns != seen_turns;
            seen_turns = turns;
            let app_asleep_on_fabric = self.fd_sleepers.load(Ordering::SeqCst) > 0;
            if self.parked.load(Ordering::SeqCst) == 0 && (app_driving || app_asleep_on_fabric) {
                // A thread asleep on the fabric may sleep long: the peer's hang-up is ours to see.
                if self.sleep(&[], sock_open && app_asleep_on_fabric, now + stay_out) {
                    self.read_bootstrap(&mut sock_open);
                }
                stay_out = (stay_out * 2).clamp(HANDOVER, HANDOVER_MAX);
                continue;
            }
            stay_out = HANDOVER;
            let until = {
                let mut core = self.lock();
                let before = core.events();
                let mut events = 0;
                loop {
                    match core.progress() {
                        0 => break,
                        n => events += n,
                    }
                }
                core.expire_peer_gone();
                let armed = core.arm();
                // Send completions may show only in the event count, arrivals in the driver's.
                let active = events > 0 || core.events() != before;
                if active {
                    self.wake_waiters();
                    stalled = 0;
                }
                match armed {
                    // Busy after a pass that moved something: more events are pending.
                    Ok(false) if active => continue,
                    // Busy with nothing moving: UCX waits on the peer (a full FIFO to a reader
                    // that has not caught up), and only progress can tell when it has. Turning
                    // at once took a third of a 2-core host from 16 busy readers.
                    Ok(false) => {
                        drop(core);
                        stalled = (stalled + 1).min(STALL_BACKOFF_STEPS);
                        std::thread::sleep(STALL_BACKOFF_MIN * (1 << stalled) / 2);
                        continue;
                    }
                    Ok(true) => {}
                    Err(e) => {
                        core.fail(e);
                        self.wake.notify_all();
                    }
                }
                fabric_fds.clear();
                if let Err(e) = core.wait_fds(&mut fabric_fds) {
                    core.fail(e);
                    self.wake.notify_all();
                }
                if active || core.outstanding() {
                    last_event = now;
                }
                // UCX may hold work of its own (a queued acknowledgement, say) that no event
                // fd announces, so never sleep long after activity: poll at 1 ms, backing
                // off as the connection stays quiet.
                let quiet = now.saturating_duration_since(last_event);
                let (min, max) = match fabric_fds.is_empty() {
                    false => (MIN_POLL, MAX_POLL),
                    true if self.parked.load(Ordering::SeqCst) > 0 => (MIN_POLL_NO_FD, MIN_POLL_NO_FD),
                    true => (MIN_POLL_NO_FD, MAX_POLL_NO_FD),
                };
                let mut wake_at = now + (quiet / 8).clamp(min, max);
                if let Some(t) = core.give_up_at() {
                    wake_at = wake_at.min(t);
                }
                linger_end.map_or(wake_at, |l| l.min(wake_at))
            };
            if self.sleep(&fabric_fds, sock_open, until) {
                self.read_bootstrap(&mut sock_open);
            }
        }
    }

    /// Reads the bootstrap socket once `sleep` says it has something: a hang-up (the peer is
    /// going) or bytes nobody may send on it.
    fn read_bootstrap(&self, sock_open: &mut bool) {
        match (&self.sock).read(&mut [0u8; 64]) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {}
            Ok(0) | Err(_) => {
                *sock_open = false;
                self.lock().peer_going("the peer hung up".into());
            }
            Ok(_) => self.fail(Violation::BootstrapBytes.into()),
        }
    }

    /// Sleeps on the kick fd, the fabric's fds and optionally the bootstrap socket, until one
    /// fires or `until`; true if the socket has something.
    fn sleep(&self, fabric: &[libc::pollfd], sock: bool, until: Instant) -> bool {
        let watch = |fd: RawFd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        let mut fds = vec![watch(self.kick.as_fd().as_raw_fd())];
        fds.extend_from_slice(fabric);
        if sock {
            fds.push(watch(self.sock.as_raw_fd()));
        }
        ppoll_until(&mut fds, until);
        let sock_ready = sock && fds.last().is_some_and(|f| f.revents != 0);
        if fds[0].revents & libc::POLLIN != 0 {
            self.kicked.store(false, Ordering::SeqCst);
            let _ = self.kick.read();
        }
        sock_ready
    }
}

/// A connection's driver, its progress thread, and their ending: the last half of the
/// connection to go stops the thread. After a graceful close the thread lingers on its own
/// until the peer has read everything and hung up, since tearing the fabric's state down
/// earlier can reset transfers still in the peer's queues.
pub(crate) struct Handle<Core: Driver> {
    pub(crate) shared: Arc<Shared<Core>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    closed_gracefully: AtomicBool,
}

impl<Core: Driver> Handle<Core> {
    /// Starts the progress thread for a connected `core`; `sock` is the authenticated
    /// bootstrap socket.
    pub(crate) fn start(core: Core, sock: TcpStream, name: &str) -> Result<Arc<Self>> {
        let shared = Shared::new(core, sock)?;
        let progress = shared.clone();
        let thread = std::thread::Builder::new().name(name.into()).spawn(move || progress.run_progress())?;
        Ok(Arc::new(Handle { shared, thread: Mutex::new(Some(thread)), closed_gracefully: AtomicBool::new(false) }))
    }

    /// Marks the connection closed gracefully: the thread lingers for the peer.
    pub(crate) fn closing_gracefully(&self) {
        self.closed_gracefully.store(true, Ordering::SeqCst);
    }
}

impl<Core: Driver> Drop for Handle<Core> {
    fn drop(&mut self) {
        let linger = self.closed_gracefully.load(Ordering::SeqCst);
        self.shared.stop(linger);
        let thread = self.thread.lock().unpoison().take();
        match thread {
            Some(t) if linger => lingering::keep(t),
            Some(t) => {
                let _ = t.join();
            }
            None => {}
        }
    }
}

/// Waits for any of `fds` until `until` (at most a second). To the microsecond (ppoll): poll's
/// milliseconds made every 50 µs poll of a fabric without an fd a whole millisecond, and each
/// one-sided write over ofi+shm 1.6 ms.
fn ppoll_until(fds: &mut [libc::pollfd], until: Instant) {
    let left = until.saturating_duration_since(Instant::now()).min(Duration::from_secs(1));
    let timeout = libc::timespec { tv_sec: left.as_secs() as libc::time_t, tv_nsec: left.subsec_nanos().into() };
    // SAFETY: `fds` is a valid array of its length; every fd outlives the call (the fabric's
    // belong to the driver, which the caller keeps alive); no signal mask.
    unsafe { libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, &timeout, std::ptr::null()) };
}
