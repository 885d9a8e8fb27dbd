//! One call's record: what it moved, who made it and how it ended, summed up once it is over.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::Telemetry;
use super::metrics::code_name;
use crate::error::Code;
use wirespeed::sync::Unpoison;

/// A call that ended, as the server's log gives it: one per call, on every plane.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CallSummary {
    /// When it began.
    pub started: SystemTime,
    /// The Flight method (`DoGet`, `GetFlightInfo`, ...), `Health`, `Reflection`, or `unknown`.
    pub method: &'static str,
    /// The plane that carried it: `grpc`, or a data plane's name (`shm`, `tcp`, `ucx`, ...).
    pub plane: &'static str,
    /// The client, as the plane names it.
    pub peer: String,
    /// Who the client proved to be: the user of a password login, `key` for a data-plane call
    /// (whose client holds the key); None for an anonymous call.
    pub identity: Option<String>,
    /// Bytes the server sent and received on the call's stream, framing included.
    pub sent_bytes: u64,
    /// See `sent_bytes`.
    pub received_bytes: u64,
    /// Record batches sent and received.
    pub sent_batches: u64,
    /// See `sent_batches`.
    pub received_batches: u64,
    /// From its start to its end.
    pub duration: Duration,
    /// How it ended: OK, the error's code, or CANCELLED for a client that went away.
    pub code: Code,
    /// The error's message; empty on success.
    pub message: String,
}

impl CallSummary {
    /// The summary as one JSON object (a line of `--log-format json`).
    pub fn to_json(&self) -> String {
        let started = self.started.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        serde_json::json!({
            "time": started.as_secs_f64(),
            "method": self.method,
            "plane": self.plane,
            "peer": self.peer,
            "identity": self.identity,
            "sent_bytes": self.sent_bytes,
            "received_bytes": self.received_bytes,
            "sent_batches": self.sent_batches,
            "received_batches": self.received_batches,
            "duration_s": self.duration.as_secs_f64(),
            "status": code_name(self.code),
            "message": self.message,
        })
        .to_string()
    }
}

/// `method plane peer identity sent received duration status [message]`, as the text log has it.
impl fmt::Display for CallSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "call {} plane={} peer={} identity={} sent={}B/{} received={}B/{} duration={:.3}ms status={}",
            self.method,
            self.plane,
            self.peer,
            self.identity.as_deref().unwrap_or("-"),
            self.sent_bytes,
            self.sent_batches,
            self.received_bytes,
            self.received_batches,
            self.duration.as_secs_f64() * 1e3,
            code_name(self.code),
        )?;
        if !self.message.is_empty() {
            write!(f, " message={:?}", self.message)?;
        }
        Ok(())
    }
}

/// A call in progress; the last of its holders to let go ends it.
pub(crate) struct CallRecord {
    telemetry: Arc<Telemetry>,
    method: &'static str,
    plane: &'static str,
    peer: String,
    started: (SystemTime, Instant),
    identity: Mutex<Option<String>>,
    outcome: Mutex<Option<(Code, String)>>,
    sent_bytes: AtomicU64,
    received_bytes: AtomicU64,
    sent_batches: AtomicU64,
    received_batches: AtomicU64,
}

impl CallRecord {
    pub(super) fn start(
        telemetry: Arc<Telemetry>,
        method: &'static str,
        plane: &'static str,
        peer: String,
    ) -> Arc<Self> {
        telemetry.metrics.call_started(plane);
        Arc::new(CallRecord {
            telemetry,
            method,
            plane,
            peer,
            started: (SystemTime::now(), Instant::now()),
            identity: Mutex::new(None),
            outcome: Mutex::new(None),
            sent_bytes: AtomicU64::new(0),
            received_bytes: AtomicU64::new(0),
            sent_batches: AtomicU64::new(0),
            received_batches: AtomicU64::new(0),
        })
    }

    pub(crate) fn sent(&self, bytes: u64) {
        self.sent_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn received(&self, bytes: u64) {
        self.received_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn sent_batch(&self) {
        self.sent_batches.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn received_batch(&self) {
        self.received_batches.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn identify(&self, identity: &str) {
        *self.identity.lock().unpoison() = Some(identity.to_string());
    }

    /// How the call ended; the first word on it stands.
    pub(crate) fn ended(&self, code: Code, message: &str) {
        self.outcome.lock().unpoison().get_or_insert_with(|| (code, message.to_string()));
    }
}

impl Drop for CallRecord {
    fn drop(&mut self) {
        let (code, message) = self
            .outcome
            .lock()
            .unpoison()
            .take()
            .unwrap_or_else(|| (Code::Cancelled, "the client went away before the call ended".into()));
        let summary = CallSummary {
            started: self.started.0,
            method: self.method,
            plane: self.plane,
            peer: std::mem::take(&mut self.peer),
            identity: self.identity.lock().unpoison().take(),
            sent_bytes: *self.sent_bytes.get_mut(),
            received_bytes: *self.received_bytes.get_mut(),
            sent_batches: *self.sent_batches.get_mut(),
            received_batches: *self.received_batches.get_mut(),
            duration: self.started.1.elapsed(),
            code,
            message,
        };
        self.telemetry.finished(&summary);
    }
}
