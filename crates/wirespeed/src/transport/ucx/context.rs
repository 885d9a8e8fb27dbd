//! The process-wide UCP context. UCX reads its `UCX_*` environment (`UCX_TLS` among it)
//! once, when the first ucx connection is made; where only TCP carries bodies between hosts,
//! we ask for one rendezvous rail unless the environment says otherwise.

use std::ffi::{CStr, c_void};
use std::sync::OnceLock;

use ucx_sys::*;

use crate::error::{Error, Result};

struct Context(ucp_context_h);

// SAFETY: created with `mt_workers_shared`, so workers on different threads may share it;
// it lives for the rest of the process.
unsafe impl Send for Context {}
// SAFETY: the same holds for shared references.
unsafe impl Sync for Context {}

static CONTEXT: OnceLock<std::result::Result<Context, String>> = OnceLock::new();

/// The context, made on first use. An initialisation failure is remembered and reported to
/// every caller.
pub(super) fn context() -> Result<ucp_context_h> {
    match CONTEXT.get_or_init(init) {
        Ok(c) => Ok(c.0),
        Err(status) => Err(Error::Fabric { op: "UCX initialisation", status: status.clone() }),
    }
}

fn init() -> std::result::Result<Context, String> {
    ucx_sys::load()?;
    let mut config = std::ptr::null_mut();
    // SAFETY: out-pointer to a local; NULL prefix and file mean the defaults and UCX_* env.
    let s = unsafe { lib().ucp_config_read(std::ptr::null(), std::ptr::null(), &mut config) };
    if s != UCS_OK {
        return Err(status_string(s));
    }
    if std::env::var_os("UCX_MAX_RNDV_RAILS").is_none() && bulk_over_sockets(std::env::var("UCX_TLS").ok().as_deref()) {
        // SAFETY: a config read above; both strings are NUL-terminated literals.
        let s = unsafe { lib().ucp_config_modify(config, c"MAX_RNDV_RAILS".as_ptr(), c"1".as_ptr()) };
        if s != UCS_OK {
            // SAFETY: read above, released once.
            unsafe { lib().ucp_config_release(config) };
            return Err(status_string(s));
        }
    }
    let params = ucp_params_t {
        field_mask: (UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_NAME) as u64,
        features: (UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP) as u64,
        mt_workers_shared: 1,
        name: c"wirespeed".as_ptr(),
        ..Default::default()
    };
    let mut ctx = std::ptr::null_mut();
    // SAFETY: valid params and config; out-pointer to a local.
    let s = unsafe { ucx_sys::ucp_init(&params, config, &mut ctx) };
    // SAFETY: read above, released once.
    unsafe { lib().ucp_config_release(config) };
    if s != UCS_OK {
        return Err(status_string(s));
    }
    Ok(Context(ctx))
}

/// Whether large bodies between hosts can only travel over TCP: no RDMA device here, or
/// `UCX_TLS` names only sockets and shared memory. UCX then stripes each rendezvous body over
/// every TCP interface, which on one host means lo and eth0, two sockets to the same place:
/// at 128 KiB over `UCX_TLS=tcp` one rail made 1.23 x what two did here. A user who wants
/// striping over several NICs sets `UCX_MAX_RNDV_RAILS` and that wins.
fn bulk_over_sockets(tls: Option<&str>) -> bool {
    const NOT_RDMA: &[&str] = &["tcp", "self", "sm", "shm", "posix", "sysv", "cma", "knem", "xpmem"];
    let named_only_sockets =
        tls.is_some_and(|tls| !tls.starts_with('^') && tls.split(',').all(|t| NOT_RDMA.contains(&t.trim())));
    let rdma_devices = std::fs::read_dir("/sys/class/infiniband").map_or(0, |d| d.count());
    named_only_sockets || rdma_devices == 0
}

/// UCX's description of a status.
pub(super) fn status_string(s: ucs_status_t) -> String {
    // SAFETY: ucs_status_string returns a static NUL-terminated string for any value.
    let text = unsafe { CStr::from_ptr(lib().ucs_status_string(s)) };
    text.to_string_lossy().into_owned()
}

/// Turns a status into a typed error naming the operation.
pub(super) fn check(op: &'static str, s: ucs_status_t) -> Result<()> {
    if s == UCS_OK { Ok(()) } else { Err(Error::Fabric { op, status: status_string(s) }) }
}

/// What a non-blocking call returned: done already (false), a request to wait for (true), or
/// an error. The endpoint refusing a request means it cannot carry any more, its peer gone,
/// most often.
pub(super) fn posted(req: ucs_status_ptr_t, what: &str) -> Result<bool> {
    if ucs_ptr_is_err(req) {
        return Err(Error::ConnectionLost(format!("{what}: {}", status_string(ucs_ptr_status(req)))));
    }
    Ok(!req.is_null())
}

/// Records a finished request's `status` in the completion slot `slot` and frees it.
///
/// # Safety
/// `request` is a live request of ours, freed here once; `slot` points to a live
/// `Option<ucs_status_t>` nobody else touches meanwhile (the Core lock is held).
pub(super) unsafe fn complete(request: *mut c_void, status: ucs_status_t, slot: *mut c_void) {
    // SAFETY: as the caller promises.
    unsafe {
        *(slot as *mut Option<ucs_status_t>) = Some(status);
        lib().ucp_request_free(request);
    }
}

/// Held while workers are created or destroyed and memory is mapped or unmapped: UCX 1.13
/// crashed in ucs_async_context_cleanup when one connection's worker was destroyed while
/// another's registered memory was unmapped, as a compute node's connections closed at once.
pub(super) fn lifecycle() -> std::sync::MutexGuard<'static, ()> {
    static LIFECYCLE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    crate::sync::Unpoison::unpoison(LIFECYCLE.lock())
}

#[cfg(test)]
mod tests {
    use super::bulk_over_sockets;

    #[test]
    fn tls_of_sockets_and_memory_only_means_one_rail() {
        for tls in ["tcp", "posix,cma,self", "tcp, sm"] {
            assert!(bulk_over_sockets(Some(tls)), "{tls}");
        }
        // Otherwise it depends on this host's devices; never for an RDMA transport named here.
        let rdma_here = std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some());
        for tls in ["rc,tcp", "^tcp", "all", "ud_verbs"] {
            assert_eq!(bulk_over_sockets(Some(tls)), !rdma_here, "{tls}");
        }
    }
}
