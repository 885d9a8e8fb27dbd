//! A thin safe layer over SimGrid's C API: one engine per process, actors that run Rust
//! closures on simulated hosts, and mailboxes that carry Rust values with a simulated size.
//! Simulated time stands in for the clock.

use std::any::Any;
use std::ffi::{CString, c_char, c_int, c_void};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use simgrid_sys::{lib, load, sg_comm_t, sg_mailbox_t};

use crate::error::{FlesError, Result};

static STARTED: AtomicBool = AtomicBool::new(false);
/// The first panic of any actor: SimGrid cannot unwind, so the actor ends and the run reports it.
static FAILURE: Mutex<Option<String>> = Mutex::new(None);

fn sim_error(what: impl Into<String>) -> FlesError {
    FlesError::Config(format!("simulation: {}", what.into()))
}

fn c_string(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| sim_error(format!("{s:?} holds a NUL byte")))
}

/// The process's one SimGrid engine.
pub struct Engine(());

impl Engine {
    /// Starts SimGrid with configuration flags such as `--cfg=network/model:CM02`; once per
    /// process (SimGrid's engine is a singleton).
    pub fn start(flags: &[&str]) -> Result<Engine> {
        let sg = load().map_err(sim_error)?;
        if STARTED.swap(true, Ordering::SeqCst) {
            return Err(sim_error("SimGrid runs one simulation per process"));
        }
        let mut args: Vec<CString> =
            std::iter::once("wirespeed").chain(flags.iter().copied()).map(c_string).collect::<Result<_>>()?;
        let mut argv: Vec<*mut c_char> = args.iter_mut().map(|a| a.as_ptr().cast_mut()).collect();
        argv.push(std::ptr::null_mut());
        let mut argc = args.len() as c_int;
        // SAFETY: argv is a NULL-terminated array of C strings that outlive the call (SimGrid
        // copies what it keeps).
        unsafe { sg.simgrid_init(&mut argc, argv.as_mut_ptr()) };
        Ok(Engine(()))
    }

    /// Loads a platform file (SimGrid's XML).
    pub fn load_platform(&self, path: &Path) -> Result<()> {
        if !path.is_file() {
            return Err(sim_error(format!("no platform file {}", path.display())));
        }
        let p = c_string(&path.to_string_lossy())?;
        // SAFETY: a valid C string; SimGrid exits the process on a malformed file, as its
        // parser does, after printing why.
        unsafe { lib().simgrid_load_platform(p.as_ptr()) };
        Ok(())
    }

    /// Starts an actor on host `host` that runs `body`.
    pub fn spawn(&self, name: &str, host: &str, body: impl FnOnce() + Send + 'static) -> Result<()> {
        let sg = lib();
        let (n, h) = (c_string(name)?, c_string(host)?);
        // SAFETY: valid C strings; a null host is refused below.
        let host = unsafe { sg.sg_host_by_name(h.as_ptr()) };
        if host.is_null() {
            return Err(sim_error(format!("no host {:?} on the platform", h)));
        }
        let body: Box<Box<dyn FnOnce() + Send>> = Box::new(Box::new(body));
        // SAFETY: the actor takes the boxed closure back exactly once, in `trampoline`.
        unsafe {
            let actor = sg.sg_actor_init(n.as_ptr(), host);
            sg.sg_actor_set_data(actor, Box::into_raw(body).cast());
            sg.sg_actor_start_(actor, Some(trampoline), 0, std::ptr::null());
        }
        Ok(())
    }

    /// Runs the simulation until every actor has ended; an actor's panic becomes the error.
    pub fn run(&self) -> Result<()> {
        // SAFETY: the engine is initialised.
        unsafe { lib().simgrid_run() };
        match FAILURE.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(why) => Err(sim_error(why)),
            None => Ok(()),
        }
    }
}

extern "C" fn trampoline(_argc: c_int, _argv: *mut *mut c_char) {
    // SAFETY: set by `spawn` to a boxed closure, taken once here.
    let body = unsafe { Box::from_raw(lib().sg_actor_self_get_data().cast::<Box<dyn FnOnce() + Send>>()) };
    if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        let why = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
        FAILURE
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(why.unwrap_or_else(|| "an actor panicked".into()));
    }
}

/// The platform's hosts' names, in SimGrid's order.
pub fn hosts() -> Vec<String> {
    let sg = lib();
    // SAFETY: SimGrid returns an array of `sg_host_count()` hosts, ours to free.
    unsafe {
        let list = sg.sg_host_list();
        let names = (0..sg.sg_host_count()).map(|i| name_of(sg.sg_host_get_name(*list.add(i)))).collect();
        free(list.cast());
        names
    }
}

/// A network link of the platform.
#[derive(Clone, Copy)]
pub struct Link(simgrid_sys::sg_link_t);

// SAFETY: as for `Mailbox`.
unsafe impl Send for Link {}

impl Link {
    /// Every link of the platform.
    pub fn all() -> Vec<Link> {
        let sg = lib();
        // SAFETY: an array of `sg_link_count()` links, ours to free.
        unsafe {
            let list = sg.sg_link_list();
            let links = (0..sg.sg_link_count()).map(|i| Link(*list.add(i))).collect();
            free(list.cast());
            links
        }
    }

    pub fn name(&self) -> String {
        // SAFETY: a live link.
        name_of(unsafe { lib().sg_link_get_name(self.0) })
    }

    /// Bytes a second.
    pub fn bandwidth(&self) -> f64 {
        // SAFETY: a live link.
        unsafe { lib().sg_link_get_bandwidth(self.0) }
    }

    pub fn set_bandwidth(&self, bytes_per_s: f64) {
        // SAFETY: a live link; SimGrid shares the new bandwidth out from now on.
        unsafe { lib().sg_link_set_bandwidth(self.0, bytes_per_s) }
    }
}

unsafe extern "C" {
    fn free(p: *mut c_void);
}

fn name_of(p: *const c_char) -> String {
    // SAFETY: SimGrid's names are NUL-terminated and live as long as their object.
    unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Simulated seconds since the start.
pub fn now() -> f64 {
    // SAFETY: the engine is initialised before any actor runs.
    unsafe { lib().simgrid_get_clock() }
}

/// Sleeps the calling actor for `seconds` of simulated time.
pub fn sleep_for(seconds: f64) {
    // SAFETY: called from an actor.
    unsafe { lib().sg_actor_sleep_for(seconds) };
}

/// What travels in a mailbox: any value, boxed.
type Payload = Box<dyn Any + Send>;

/// A rendezvous point, by name; a transfer takes the simulated time of `size` bytes between
/// the sender's and the receiver's hosts.
#[derive(Clone, Copy)]
pub struct Mailbox(sg_mailbox_t);

// SAFETY: a handle to a SimGrid object that lives for the whole simulation; actors run one
// at a time.
unsafe impl Send for Mailbox {}

impl Mailbox {
    pub fn by_name(name: &str) -> Result<Mailbox> {
        let n = c_string(name)?;
        // SAFETY: a valid C string; SimGrid keeps its own copy.
        Ok(Mailbox(unsafe { lib().sg_mailbox_by_name(n.as_ptr()) }))
    }

    /// Sends `value` as `size` simulated bytes; returns once it is received.
    pub fn put<T: Any + Send>(&self, value: T, size: u64) {
        let payload: Box<Payload> = Box::new(Box::new(value));
        // SAFETY: the receiver takes the payload back exactly once (`take`).
        unsafe { lib().sg_mailbox_put(self.0, Box::into_raw(payload).cast(), size as i64) };
    }

    /// Makes the calling actor this mailbox's receiver: transfers start as soon as they are
    /// sent, as one-sided writes do, rather than when a receive is posted.
    pub fn receive_eagerly(name: &str) -> Result<Mailbox> {
        let n = c_string(name)?;
        // SAFETY: a valid C string, from an actor.
        unsafe { lib().sg_mailbox_set_receiver(n.as_ptr()) };
        Mailbox::by_name(name)
    }

    /// Starts sending `value` as `size` simulated bytes.
    pub fn put_async<T: Any + Send>(&self, value: T, size: u64) -> Comm {
        let payload: Box<Payload> = Box::new(Box::new(value));
        // SAFETY: as for `put`.
        let comm = unsafe { lib().sg_mailbox_put_async(self.0, Box::into_raw(payload).cast(), size as i64) };
        Comm { comm, slot: None }
    }

    /// Waits for the next value.
    pub fn get<T: Any>(&self) -> Result<T> {
        // SAFETY: called from an actor; what arrives is a payload from `put`.
        take(unsafe { lib().sg_mailbox_get(self.0) })
    }

    /// Starts waiting for the next value; `Comm::value` has it once the comm is done.
    pub fn get_async(&self) -> Comm {
        let mut slot = Box::new(std::ptr::null_mut::<c_void>());
        // SAFETY: the slot lives in the comm until it completes or is dropped.
        let comm = unsafe { lib().sg_mailbox_get_async(self.0, &mut *slot) };
        Comm { comm, slot: Some(slot) }
    }
}

fn take<T: Any>(raw: *mut c_void) -> Result<T> {
    if raw.is_null() {
        return Err(sim_error("an empty message"));
    }
    // SAFETY: every payload is a Box<Payload> from `put`.
    let payload = unsafe { Box::from_raw(raw.cast::<Payload>()) };
    payload.downcast::<T>().map(|b| *b).map_err(|_| sim_error("a message of another type"))
}

/// A transfer under way. SimGrid frees a transfer once it is waited for, so waiting consumes
/// it; one dropped unfinished keeps its landing slot (leaked), since SimGrid may still write it.
pub struct Comm {
    /// Null once finished.
    comm: sg_comm_t,
    /// Where a receive lands.
    slot: Option<Box<*mut c_void>>,
}

impl Comm {
    /// Waits for the first of `comms` to finish and takes it out of `comms`, with where it
    /// was; None if there are none. There is no timeout: SimGrid 3.32's C API frees every comm
    /// of a `wait_any` that times out (see [`Comm::wait_timeout`]).
    pub fn wait_any(comms: &mut Vec<Comm>) -> Option<(usize, Comm)> {
        let mut raw: Vec<sg_comm_t> = comms.iter().map(|c| c.comm).collect();
        if raw.is_empty() {
            return None;
        }
        // SAFETY: live comms; SimGrid frees the one it returns and keeps the others.
        let i = unsafe { lib().sg_comm_wait_any_for(raw.as_mut_ptr(), raw.len(), -1.0) };
        let i = usize::try_from(i).ok()?;
        let mut done = comms.remove(i);
        done.comm = std::ptr::null_mut();
        Some((i, done))
    }

    /// Waits up to `timeout` simulated seconds for this transfer: Ok once it has finished,
    /// Err with it still under way on timeout. (Through `wait_all_for`, which alone keeps
    /// the comms it did not finish.)
    pub fn wait_timeout(mut self, timeout: f64) -> std::result::Result<Comm, Comm> {
        if self.comm.is_null() {
            return Ok(self);
        }
        let mut raw = [self.comm];
        // SAFETY: a live comm; SimGrid frees it if it finished and keeps it otherwise.
        let finished = unsafe { lib().sg_comm_wait_all_for(raw.as_mut_ptr(), 1, timeout.max(0.0)) };
        if finished == 0 {
            return Err(self);
        }
        self.comm = std::ptr::null_mut();
        Ok(self)
    }

    /// Waits for this transfer (at once if it has finished).
    pub fn wait(mut self) -> Result<Comm> {
        if self.comm.is_null() {
            return Ok(self);
        }
        // SAFETY: a live comm, which SimGrid frees here.
        let status = unsafe { lib().sg_comm_wait(self.comm) };
        self.comm = std::ptr::null_mut();
        match status {
            simgrid_sys::SG_OK => Ok(self),
            e => Err(sim_error(format!("a transfer failed ({e})"))),
        }
    }

    /// Whether this is a receive (it has a value once done).
    pub fn is_receive(&self) -> bool {
        self.slot.is_some()
    }

    /// The value a receive got, once it has finished.
    pub fn value<T: Any>(mut self) -> Result<T> {
        if !self.comm.is_null() {
            return Err(sim_error("a transfer read before it finished"));
        }
        let slot = self.slot.take().ok_or_else(|| sim_error("a send has no value"))?;
        take(*slot)
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        if !self.comm.is_null()
            && let Some(slot) = self.slot.take()
        {
            Box::leak(slot);
        }
    }
}
