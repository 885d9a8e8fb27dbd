//! One libfabric endpoint per connection: the provider `fi_getinfo` finds for what we ask,
//! its fabric, domain, address vector, completion queue and reliable-datagram endpoint, the
//! peer's address in the vector, and memory registrations. Everything here is called with
//! the connection's lock held (see `core`), except registrations, which the domain's
//! FI_THREAD_SAFE threading allows from any thread.

use std::ffi::{CStr, CString, c_void};
use std::os::fd::RawFd;
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use ofi_sys::*;

use crate::error::{Error, Result};
use crate::fabric::Provider;
use crate::sync::Unpoison;

/// `FI_ADDR_UNSPEC`: `(fi_addr_t) -1` in fabric.h, which bindgen cannot translate.
pub(super) const FI_ADDR_UNSPEC: fi_addr_t = u64::MAX;
/// Completion queue entries; far more than the operations we keep posted.
const CQ_SIZE: usize = 4096;

/// A libfabric status (0 or a negative error number) as a result.
pub(super) fn check(op: &'static str, status: isize) -> Result<()> {
    if status >= 0 { Ok(()) } else { Err(Error::Fabric { op, status: strerror(status as i64) }) }
}

/// An open libfabric object, closed on drop.
struct Fid(*mut fid);

impl Drop for Fid {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: an object libfabric opened for us, closed once.
            unsafe { ws_fi_close(self.0) };
        }
    }
}

/// What the provider can do, as `fi_getinfo` reported it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Abilities {
    /// One-sided reads and writes (FI_RMA): large bodies and one-sided access use them.
    pub(super) rma: bool,
    /// Local buffers must be registered too (FI_MR_LOCAL).
    pub(super) mr_local: bool,
    /// Remote addresses are virtual addresses, not offsets into the region (FI_MR_VIRT_ADDR).
    pub(super) mr_virt_addr: bool,
    /// The provider picks registration keys (FI_MR_PROV_KEY); otherwise we do.
    pub(super) mr_prov_key: bool,
    /// Registrations are bound to the endpoint and enabled (FI_MR_ENDPOINT).
    pub(super) mr_endpoint: bool,
    /// Largest message sent by `fi_inject`, which needs no completion.
    pub(super) inject_size: usize,
}

/// A fabric and domain: what registrations belong to, so they keep it open. Every
/// connection over the same provider, interface and one-sided access in a process shares one,
/// as libfabric intends: opening them took 2 to 200 ms a connection.
struct Domain {
    fabric: *mut fid_fabric,
    domain: *mut fid_domain,
    /// Owners of the two, in the order they were opened.
    owned: Vec<Fid>,
    /// What `fi_getinfo` answered, which endpoints are opened with; freed last.
    info: *mut fi_info,
    abilities: Abilities,
    /// Keys handed out when the provider does not pick them: unique in the domain.
    next_key: AtomicU64,
}

/// The domains open in this process, by provider, interface and whether without one-sided
/// access; each lives while an endpoint or registration holds it.
type DomainKey = (Provider, Option<String>, bool);
static DOMAINS: Mutex<Vec<(DomainKey, Weak<Domain>)>> = Mutex::new(Vec::new());

// SAFETY: the domain is FI_THREAD_SAFE.
unsafe impl Send for Domain {}
// SAFETY: the same holds for shared references.
unsafe impl Sync for Domain {}

impl Drop for Domain {
    fn drop(&mut self) {
        while let Some(f) = self.owned.pop() {
            drop(f);
        }
        // SAFETY: allocated by fi_getinfo, freed once, after everything opened with it.
        unsafe { lib().fi_freeinfo(self.info) };
    }
}

impl Domain {
    /// The process's domain for `provider` (see `Endpoint::open`), opened if none is.
    fn shared(provider: Provider, no_rma: bool, source: Option<&str>) -> Result<Arc<Domain>> {
        let key = (provider, source.map(str::to_owned), no_rma);
        let mut open = DOMAINS.lock().unpoison();
        open.retain(|(_, d)| d.strong_count() > 0);
        if let Some(d) = open.iter().filter(|(k, _)| *k == key).find_map(|(_, d)| d.upgrade()) {
            return Ok(d);
        }
        let info = match no_rma {
            false => get_info(provider, true, source).or_else(|_| get_info(provider, false, source))?,
            true => get_info(provider, false, source)?,
        };
        let d = Arc::new(Domain::open(info)?);
        open.push((key, Arc::downgrade(&d)));
        Ok(d)
    }

    /// Opens the fabric and domain `info` describes; owns `info` from here on.
    fn open(info: *mut fi_info) -> Result<Domain> {
        // SAFETY: `info` is a valid list head from fi_getinfo; its attribute structs are set.
        let (caps, mr_mode, inject_size) =
            unsafe { ((*info).caps, (*(*info).domain_attr).mr_mode as u32, (*(*info).tx_attr).inject_size) };
        let abilities = Abilities {
            rma: caps & FI_RMA as u64 != 0,
            mr_local: mr_mode & FI_MR_LOCAL != 0,
            mr_virt_addr: mr_mode & FI_MR_VIRT_ADDR != 0,
            mr_prov_key: mr_mode & FI_MR_PROV_KEY != 0,
            mr_endpoint: mr_mode & FI_MR_ENDPOINT != 0,
            inject_size,
        };
        let mut d = Domain {
            fabric: null_mut(),
            domain: null_mut(),
            owned: Vec::new(),
            info,
            abilities,
            next_key: AtomicU64::new(1),
        };
        // SAFETY: valid attributes from `info`; out-pointers to fields; each object opened is
        // owned by `d` at once, so an error closes it.
        unsafe {
            check("opening the fabric", lib().fi_fabric((*info).fabric_attr, &mut d.fabric, null_mut()) as isize)?;
            d.owned.push(Fid(&mut (*d.fabric).fid));
            check("opening the domain", ws_fi_domain(d.fabric, info, &mut d.domain, null_mut()) as isize)?;
            d.owned.push(Fid(&mut (*d.domain).fid));
        }
        Ok(d)
    }
}

/// The objects of one connection's endpoint, closed in reverse order of opening on drop, so
/// the endpoint closes before what it is bound to. Registrations keep the domain open.
pub(super) struct Endpoint {
    domain: Arc<Domain>,
    fabric: *mut fid_fabric,
    av: *mut fid_av,
    cq: *mut fid_cq,
    ep: *mut fid_ep,
    /// Owners of the objects above but the domain, in the order they were opened.
    owned: Vec<Fid>,
    pub(super) abilities: Abilities,
    pub(super) provider: Provider,
    /// The peer's address in our address vector, once inserted.
    peer: fi_addr_t,
    /// How the completion queue is slept on.
    wait: Wait,
}

// SAFETY: the domain is FI_THREAD_SAFE; data-path calls are made with the connection's lock.
unsafe impl Send for Endpoint {}
// SAFETY: the same holds for shared references.
unsafe impl Sync for Endpoint {}

/// How a completion queue is slept on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// One fd the provider signals on every completion (a write and a read each).
    Fd(RawFd),
    /// Nothing: the progress thread polls.
    Poll,
}

/// What one read of the completion queue found.
pub(super) enum Completions {
    /// This many entries were filled.
    Some(usize),
    Empty,
    /// An operation failed: its context, and why.
    Failed(*mut c_void, String),
}

impl Endpoint {
    /// Opens an RDM endpoint on `provider`, with one-sided access unless `no_rma` or the
    /// provider lacks it, in the process's domain for them. `source`: the local address (of
    /// the bootstrap socket) that picks the interface, for providers that bind to one.
    pub(super) fn open(provider: Provider, no_rma: bool, source: Option<&str>) -> Result<Endpoint> {
        ofi_sys::load().map_err(|e| Error::Fabric { op: "opening libfabric", status: e.into() })?;
        let source = if provider == Provider::Tcp { source } else { None };
        let domain = Domain::shared(provider, no_rma, source)?;
        let info = domain.info;
        let mut e = Endpoint {
            fabric: domain.fabric,
            abilities: domain.abilities,
            provider,
            domain,
            av: null_mut(),
            cq: null_mut(),
            ep: null_mut(),
            owned: Vec::new(),
            peer: FI_ADDR_UNSPEC,
            wait: Wait::Poll,
        };
        // SAFETY: (this block) each call gets valid attributes from `info` and out-pointers
        // to fields; every object opened is owned by `e` at once, so an error closes it.
        unsafe {
            let (ctx, domain) = (null_mut(), e.domain.domain);
            let mut av_attr = fi_av_attr { type_: FI_AV_TABLE, count: 1, ..Default::default() };
            check("opening the address vector", ws_fi_av_open(domain, &mut av_attr, &mut e.av, ctx) as isize)?;
            e.owned.push(Fid(&mut (*e.av).fid));
            e.open_cq()?;
            check("opening the endpoint", ws_fi_endpoint(domain, info, &mut e.ep, ctx) as isize)?;
            e.owned.push(Fid(&mut (*e.ep).fid));
            check("binding the address vector", ws_fi_ep_bind(e.ep, &mut (*e.av).fid, 0) as isize)?;
            let flags = (FI_TRANSMIT | FI_RECV) as u64;
            check("binding the completion queue", ws_fi_ep_bind(e.ep, &mut (*e.cq).fid, flags) as isize)?;
            check("enabling the endpoint", ws_fi_enable(e.ep) as isize)?;
        }
        Ok(e)
    }

    /// Opens the completion queue with an fd the provider signals, else none (shm: the
    /// progress thread then polls). Not the fds tcp;ofi_rxm polls itself (FI_WAIT_POLLFD):
    /// with two endpoints in a process, the set one of them gave left out the socket its
    /// peer's messages came on, so its waits ran to their timeouts, and `fles run --local
    /// 2:2` over ofi+tcp took 46 s where the signalled fd takes 1 s, at the same speed alone.
    ///
    /// # Safety
    /// The domain is open.
    unsafe fn open_cq(&mut self) -> Result<()> {
        for wait_obj in [FI_WAIT_FD, FI_WAIT_NONE] {
            let mut attr = fi_cq_attr { size: CQ_SIZE, format: FI_CQ_FORMAT_MSG, wait_obj, ..Default::default() };
            // SAFETY: open domain, valid attributes, out-pointer to a field.
            let status = unsafe { ws_fi_cq_open(self.domain.domain, &mut attr, &mut self.cq, null_mut()) };
            if wait_obj != FI_WAIT_NONE && (status == -(FI_ENOSYS as i32) || status == -(FI_EINVAL as i32)) {
                continue;
            }
            check("opening the completion queue", status as isize)?;
            // SAFETY: just opened.
            self.owned.push(Fid(unsafe { &mut (*self.cq).fid }));
            self.wait = match wait_obj {
                FI_WAIT_FD => {
                    let mut fd: RawFd = -1;
                    // SAFETY: FI_GETWAIT writes the fd of an FI_WAIT_FD queue into an int.
                    let status = unsafe { ws_fi_control(&mut (*self.cq).fid, FI_GETWAIT as i32, (&raw mut fd).cast()) };
                    check("getting the completion queue's fd", status as isize)?;
                    Wait::Fd(fd)
                }
                _ => Wait::Poll,
            };
            return Ok(());
        }
        unreachable!("the last wait object is not retried")
    }

    /// Our endpoint's name, for the peer's address vector.
    pub(super) fn name(&self) -> Result<Vec<u8>> {
        let mut name = vec![0u8; 256];
        let mut len = name.len();
        // SAFETY: open endpoint; the buffer holds `len` bytes.
        let mut status = unsafe { ws_fi_getname(&mut (*self.ep).fid, name.as_mut_ptr().cast(), &mut len) };
        if status == -(FI_ETOOSMALL as i32) {
            name.resize(len, 0);
            // SAFETY: as above, with the size the provider asked for.
            status = unsafe { ws_fi_getname(&mut (*self.ep).fid, name.as_mut_ptr().cast(), &mut len) };
        }
        check("getting the endpoint's name", status as isize)?;
        name.truncate(len);
        Ok(name)
    }

    /// Puts the peer's endpoint name (from the authenticated bootstrap) in our address vector.
    pub(super) fn insert_peer(&mut self, name: &[u8]) -> Result<()> {
        let mut addr = FI_ADDR_UNSPEC;
        // SAFETY: open address vector; the provider reads one address of its own format from
        // `name`, which is at least as long as the names its endpoints have.
        let inserted = unsafe { ws_fi_av_insert(self.av, name.as_ptr().cast(), 1, &mut addr, 0, null_mut()) };
        if inserted != 1 {
            return Err(Error::Fabric { op: "adding the peer's address", status: "not an endpoint name".into() });
        }
        self.peer = addr;
        Ok(())
    }

    /// Closes the endpoint alone: the provider then no longer touches any buffer of an
    /// operation posted on it, complete or not. Later operations fail as closed.
    pub(super) fn close_endpoint(&mut self) {
        if !self.ep.is_null() {
            self.owned.pop(); // the endpoint, opened last
            self.ep = null_mut();
        }
    }

    fn open_ep(&self) -> Result<*mut fid_ep> {
        if self.ep.is_null() { Err(Error::Closed) } else { Ok(self.ep) }
    }

    /// Adds the fds to sleep on for completions to `fds` (none: poll).
    pub(super) fn wait_fds(&mut self, fds: &mut Vec<libc::pollfd>) -> Result<()> {
        match self.wait {
            Wait::Poll => {}
            Wait::Fd(fd) => fds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 }),
        }
        Ok(())
    }

    /// Whether the completion queue may be slept on: false while completions are pending.
    pub(super) fn try_wait(&self) -> Result<bool> {
        if self.wait == Wait::Poll {
            return Ok(true); // nothing to sleep on; the progress thread polls
        }
        let mut fids = [self.cq.cast::<fid>()];
        // SAFETY: open fabric and queue.
        match unsafe { ws_fi_trywait(self.fabric, fids.as_mut_ptr(), 1) } {
            0 => Ok(true),
            s if s == -(FI_EAGAIN as i32) => Ok(false),
            s => check("arming the completion queue", s as isize).map(|_| false),
        }
    }

    /// Reads completions into `out`.
    pub(super) fn read_cq(&self, out: &mut [fi_cq_msg_entry]) -> Completions {
        // SAFETY: open queue; `out` holds `out.len()` entries of the queue's format.
        let n = unsafe { ws_fi_cq_read(self.cq, out.as_mut_ptr().cast(), out.len()) };
        if n > 0 {
            return Completions::Some(n as usize);
        }
        if n == -(FI_EAGAIN as isize) || n == 0 {
            return Completions::Empty;
        }
        let mut err = fi_cq_err_entry::default();
        // SAFETY: open queue; one error entry.
        if n == -(FI_EAVAIL as isize) && unsafe { ws_fi_cq_readerr(self.cq, &mut err, 0) } == 1 {
            let mut text = [0 as std::ffi::c_char; 256];
            // SAFETY: the error entry's data is valid until the queue is read again.
            let why = unsafe {
                let s = ws_fi_cq_strerror(self.cq, err.prov_errno, err.err_data, text.as_mut_ptr(), text.len());
                if s.is_null() { String::new() } else { CStr::from_ptr(s).to_string_lossy().into_owned() }
            };
            return Completions::Failed(err.op_context, format!("{} ({why})", strerror(err.err as i64)));
        }
        Completions::Failed(null_mut(), format!("reading completions: {}", strerror(n as i64)))
    }

    /// Sends `iov` to the peer; completion comes to `ctx`. `Ok(false)`: the provider is
    /// busy (FI_EAGAIN), try again after progress.
    ///
    /// # Safety
    /// The buffers and `ctx` stay valid until the completion is read; `desc` has one entry
    /// per buffer (registrations' descriptors, or null where the provider needs none).
    pub(super) unsafe fn send(&self, iov: &[libc::iovec], desc: &mut [*mut c_void], ctx: *mut c_void) -> Result<bool> {
        // SAFETY: as the caller promises; iovec has the layout of the header's struct iovec.
        let s =
            unsafe { ws_fi_sendv(self.open_ep()?, iov.as_ptr().cast(), desc.as_mut_ptr(), iov.len(), self.peer, ctx) };
        posted("sending", s)
    }

    /// Sends a small message (at most `inject_size`) that needs no completion.
    pub(super) fn inject(&self, msg: &[u8]) -> Result<bool> {
        // SAFETY: the provider copies the bytes before returning.
        let s = unsafe { ws_fi_inject(self.open_ep()?, msg.as_ptr().cast(), msg.len(), self.peer) };
        posted("sending", s)
    }

    /// Posts a receive buffer.
    ///
    /// # Safety
    /// `buf` and `ctx` stay valid until the completion is read (or the endpoint closes).
    pub(super) unsafe fn recv(&self, buf: &mut [u8], desc: *mut c_void, ctx: *mut c_void) -> Result<bool> {
        // SAFETY: as the caller promises.
        let s = unsafe { ws_fi_recv(self.open_ep()?, buf.as_mut_ptr().cast(), buf.len(), desc, FI_ADDR_UNSPEC, ctx) };
        posted("posting a receive", s)
    }

    /// Reads `len` bytes of the peer's registered memory at `remote` into `buf`
    /// (`write`: writes them there from `buf` instead, completing once they are there).
    ///
    /// # Safety
    /// `buf` and `ctx` stay valid until the completion is read.
    pub(super) unsafe fn rma(
        &self,
        write: bool,
        buf: *mut u8,
        len: usize,
        desc: *mut c_void,
        remote: (u64, u64),
        ctx: *mut c_void,
    ) -> Result<bool> {
        let (addr, key) = remote;
        let ep = self.open_ep()?;
        // SAFETY: as the caller promises.
        let s = unsafe {
            if write {
                ws_fi_write_delivered(ep, buf.cast(), len, desc, self.peer, addr, key, ctx)
            } else {
                ws_fi_read(ep, buf.cast(), len, desc, self.peer, addr, key, ctx)
            }
        };
        posted(if write { "writing to the peer" } else { "reading from the peer" }, s)
    }

    /// Registers `len` bytes at `ptr` for `access` (FI_SEND, FI_RECV, FI_READ,
    /// FI_REMOTE_READ, ...). Callable from any thread.
    ///
    /// # Safety
    /// The memory stays valid until the registration drops.
    pub(super) unsafe fn register(&self, ptr: *const u8, len: usize, access: u64) -> Result<Registration> {
        let key = if self.abilities.mr_prov_key { 0 } else { self.domain.next_key.fetch_add(1, Ordering::Relaxed) };
        let mut mr = null_mut();
        // SAFETY: open domain; the caller keeps the memory valid.
        let s =
            unsafe { ws_fi_mr_reg(self.domain.domain, ptr.cast(), len.max(1), access, 0, key, 0, &mut mr, null_mut()) };
        check("registering memory", s as isize)?;
        // SAFETY: just registered; owned by the returned value from here on.
        let fid = Fid(unsafe { &mut (*mr).fid });
        if self.abilities.mr_endpoint {
            // SAFETY: open registration and endpoint.
            unsafe {
                check("binding a registration", ws_fi_mr_bind(mr, &mut (*self.ep).fid, 0) as isize)?;
                check("enabling a registration", ws_fi_mr_enable(mr) as isize)?;
            }
        }
        let addr = if self.abilities.mr_virt_addr { ptr as u64 } else { 0 };
        // SAFETY: an enabled registration.
        let (desc, key) = unsafe { (ws_fi_mr_desc(mr), ws_fi_mr_key(mr)) };
        Ok(Registration { _fid: fid, _domain: self.domain.clone(), desc, addr, key })
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        while let Some(f) = self.owned.pop() {
            drop(f);
        }
    }
}

/// Registered memory: what a local operation passes as its descriptor, and what a peer needs
/// to reach it. Dropping it revokes the peer's access.
pub(super) struct Registration {
    /// Closed before the domain it belongs to lets go.
    _fid: Fid,
    _domain: Arc<Domain>,
    pub(super) desc: *mut c_void,
    /// Where the region starts in the peer's requests: its address, or 0 (offsets).
    pub(super) addr: u64,
    pub(super) key: u64,
}

// SAFETY: a handle the FI_THREAD_SAFE domain lets any thread use and close.
unsafe impl Send for Registration {}
// SAFETY: the same holds for shared references.
unsafe impl Sync for Registration {}

/// A posting call's status: done, busy (`Ok(false)`), or failed.
fn posted(op: &'static str, status: isize) -> Result<bool> {
    match status {
        0 => Ok(true),
        s if s == -(FI_EAGAIN as isize) => Ok(false),
        s => check(op, s).map(|_| false),
    }
}

/// Asks libfabric for an RDM endpoint of `provider` with messages and, if `rma`, one-sided
/// access, in any memory-registration mode we handle.
fn get_info(provider: Provider, rma: bool, source: Option<&str>) -> Result<*mut fi_info> {
    let hints = fi_allocinfo();
    if hints.is_null() {
        return Err(Error::Fabric { op: "fi_allocinfo", status: "out of memory".into() });
    }
    let mut caps = FI_MSG as u64;
    if rma {
        caps |= (FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE) as u64;
    }
    let name = CString::new(provider.libfabric_name()).expect("no NUL in provider names");
    let node = source.map(|s| CString::new(s).expect("an IP address has no NUL"));
    let mut info = null_mut();
    // SAFETY: `hints` and its attribute structs were allocated by fi_dupinfo; the provider
    // name is handed over as malloc'd memory, which fi_freeinfo frees.
    let status = unsafe {
        (*hints).caps = caps;
        (*hints).mode = FI_CONTEXT | FI_CONTEXT2;
        (*(*hints).ep_attr).type_ = FI_EP_RDM;
        let d = &mut *(*hints).domain_attr;
        d.mr_mode = (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED | FI_MR_ENDPOINT) as i32;
        d.threading = FI_THREAD_SAFE;
        (*(*hints).tx_attr).msg_order = FI_ORDER_SAS as u64;
        (*(*hints).rx_attr).msg_order = FI_ORDER_SAS as u64;
        (*(*hints).fabric_attr).prov_name = libc::strdup(name.as_ptr());
        let (node, flags) = match &node {
            Some(n) => (n.as_ptr(), FI_SOURCE),
            None => (null(), 0),
        };
        let status = lib().fi_getinfo(FI_VERSION_BUILT, node, null(), flags, hints, &mut info);
        lib().fi_freeinfo(hints);
        status
    };
    if status != 0 || info.is_null() {
        let what = if rma { "with messages and one-sided access" } else { "with messages" };
        let why = if status != 0 { strerror(status as i64) } else { "no match".into() };
        return Err(Error::Fabric {
            op: "finding a libfabric provider",
            status: format!("{} has no reliable-datagram endpoint {what}: {why}", provider.libfabric_name()),
        });
    }
    Ok(info)
}
