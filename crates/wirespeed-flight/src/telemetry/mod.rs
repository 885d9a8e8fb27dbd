//! What a server tells its operator: a record of every call, on every plane, that ends as one
//! [`CallSummary`] (the log line) and in the Prometheus metrics, which the server serves over
//! HTTP when asked (see [`ServerBuilder::metrics`](crate::ServerBuilder::metrics)).

pub(crate) mod call;
pub(crate) mod endpoint;
pub(crate) mod metrics;

use std::sync::Arc;

use crate::handler::Handler;

pub(crate) use call::CallRecord;
pub use call::CallSummary;
pub(crate) use metrics::Metrics;

/// What hears of every call as it ends.
pub type CallObserver = Arc<dyn Fn(&CallSummary) + Send + Sync>;

/// A server's metrics and whoever hears of its calls.
pub(crate) struct Telemetry {
    pub metrics: Metrics,
    pub observer: Option<CallObserver>,
}

impl Telemetry {
    pub(crate) fn new(handler: Arc<dyn Handler>, observer: Option<CallObserver>) -> Arc<Self> {
        Arc::new(Telemetry { metrics: Metrics::new(handler), observer })
    }

    /// A call on `plane` from `peer` begins.
    pub(crate) fn start(self: &Arc<Self>, method: &'static str, plane: &'static str, peer: String) -> Arc<CallRecord> {
        CallRecord::start(self.clone(), method, plane, peer)
    }

    fn finished(&self, summary: &CallSummary) {
        self.metrics.call_ended(summary);
        if let Some(observer) = &self.observer {
            observer(summary);
        }
    }
}

/// The methods calls are counted under: Flight's, the side services', and `unknown` for any
/// other path, so that no client adds a label value.
pub(crate) const METHODS: [&str; 13] = [
    "Handshake",
    "ListFlights",
    "GetFlightInfo",
    "PollFlightInfo",
    "GetSchema",
    "DoGet",
    "DoPut",
    "DoExchange",
    "DoAction",
    "ListActions",
    "Health",
    "Reflection",
    "unknown",
];

/// The method a gRPC path calls, as [`METHODS`] names it.
pub(crate) fn method_of(path: &str) -> &'static str {
    if path.starts_with(crate::grpc::health::PATH) {
        return "Health";
    }
    if crate::grpc::reflection::PATHS.iter().any(|p| path.starts_with(p)) {
        return "Reflection";
    }
    let name = path.strip_prefix("/arrow.flight.protocol.FlightService/").unwrap_or("");
    METHODS[..10].iter().find(|m| **m == name).copied().unwrap_or("unknown")
}
