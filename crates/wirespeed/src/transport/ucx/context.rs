//! The process-wide UCP context. UCX reads its `UCX_*` environment (`UCX_TLS` among it)
//! once, when the first ucx connection is made.

use std::ffi::CStr;
use std::sync::OnceLock;

use ucx_sys::*;

use crate::error::{Error, Result};

struct Context(ucp_context_h);

// SAFETY: created with `mt_workers_shared`, so workers on different threads may share it;
// it lives for the rest of the process.
unsafe impl Send for Context {}
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
