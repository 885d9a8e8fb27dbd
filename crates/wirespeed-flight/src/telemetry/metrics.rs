//! The server's Prometheus metrics, named as Prometheus's conventions ask (`promtool check
//! metrics` is clean): a `wirespeed_flight_` prefix, base units, `_total` on counters. Labels take
//! values from fixed sets only (methods, planes, codes, reasons), so that no client can make
//! the server keep a series per request.

use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use super::CallSummary;
use crate::error::Code;
use crate::handler::Handler;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    method: &'static str,
    plane: &'static str,
    code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodPlane {
    method: &'static str,
    plane: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PlaneLabel {
    plane: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

/// Why a call or connection was turned away, as the `reason` label says it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Refusal {
    /// Past `calls_per_client`.
    CallsPerClient,
    /// The server is draining.
    Draining,
    /// More request metadata than gRPC allows.
    Metadata,
    /// No exchange slot free.
    Exchanges,
    /// Past the bytes held for readers: the call that waited longest was cancelled.
    ResponseBytes,
    /// A TLS handshake that failed or took too long.
    TlsHandshake,
    /// A data-plane connection whose handshake failed (a wrong key, say).
    PlaneHandshake,
}

impl Refusal {
    fn reason(self) -> &'static str {
        match self {
            Refusal::CallsPerClient => "calls_per_client",
            Refusal::Draining => "draining",
            Refusal::Metadata => "metadata",
            Refusal::Exchanges => "exchanges",
            Refusal::ResponseBytes => "response_bytes",
            Refusal::TlsHandshake => "tls_handshake",
            Refusal::PlaneHandshake => "plane_handshake",
        }
    }
}

pub(crate) struct Metrics {
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    durations: Family<MethodPlane, Histogram>,
    sent_bytes: Family<PlaneLabel, Counter>,
    received_bytes: Family<PlaneLabel, Counter>,
    sent_batches: Family<PlaneLabel, Counter>,
    received_batches: Family<PlaneLabel, Counter>,
    active_calls: Family<PlaneLabel, Gauge>,
    connections: Family<PlaneLabel, Gauge>,
    /// Bytes of request messages held (uploads and exchanges in progress).
    pub request_bytes: Gauge,
    /// Bytes of responses encoded and not yet taken by their readers.
    pub response_bytes: Gauge,
    auth_failures: Family<ReasonLabel, Counter>,
    refused_calls: Family<ReasonLabel, Counter>,
    refused_connections: Family<ReasonLabel, Counter>,
}

impl Metrics {
    pub(crate) fn new(handler: Arc<dyn Handler>) -> Self {
        // The server's series under its prefix; the handler's named in full.
        let mut registry = Registry::default();
        let durations = Family::<MethodPlane, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 3.0, 12))
        });
        let metrics = Metrics {
            registry: Registry::default(),
            calls: Family::default(),
            durations,
            sent_bytes: Family::default(),
            received_bytes: Family::default(),
            sent_batches: Family::default(),
            received_batches: Family::default(),
            active_calls: Family::default(),
            connections: Family::default(),
            request_bytes: Gauge::default(),
            response_bytes: Gauge::default(),
            auth_failures: Family::default(),
            refused_calls: Family::default(),
            refused_connections: Family::default(),
        };
        let r = registry.sub_registry_with_prefix("wirespeed_flight");
        r.register("calls", "Calls that ended, by method, plane and status code", metrics.calls.clone());
        r.register_with_unit(
            "call_duration",
            "How long calls took, from their start to their end",
            Unit::Seconds,
            metrics.durations.clone(),
        );
        r.register_with_unit("sent", "Bytes sent on calls' streams", Unit::Bytes, metrics.sent_bytes.clone());
        r.register_with_unit(
            "received",
            "Bytes received on calls' streams",
            Unit::Bytes,
            metrics.received_bytes.clone(),
        );
        r.register("sent_batches", "Record batches sent", metrics.sent_batches.clone());
        r.register("received_batches", "Record batches received", metrics.received_batches.clone());
        r.register("active_calls", "Calls open now", metrics.active_calls.clone());
        r.register("open_connections", "Client connections open now", metrics.connections.clone());
        r.register_with_unit(
            "request_held",
            "Bytes of large request messages held (uploads and exchanges in progress)",
            Unit::Bytes,
            metrics.request_bytes.clone(),
        );
        r.register_with_unit(
            "response_held",
            "Bytes of responses encoded and not yet taken by their readers",
            Unit::Bytes,
            metrics.response_bytes.clone(),
        );
        r.register("auth_failures", "Failed authentications, by what failed", metrics.auth_failures.clone());
        r.register("refused_calls", "Calls refused or cut short by a limit, by reason", metrics.refused_calls.clone());
        r.register("refused_connections", "Connections refused, by reason", metrics.refused_connections.clone());
        registry.register_collector(Box::new(HandlerGauges(handler)));
        Metrics { registry, ..metrics }
    }

    pub(super) fn call_started(&self, plane: &'static str) {
        self.active_calls.get_or_create(&PlaneLabel { plane }).inc();
    }

    pub(super) fn call_ended(&self, s: &CallSummary) {
        let plane = PlaneLabel { plane: s.plane };
        self.active_calls.get_or_create(&plane).dec();
        self.calls.get_or_create(&CallLabels { method: s.method, plane: s.plane, code: code_name(s.code) }).inc();
        let method = MethodPlane { method: s.method, plane: s.plane };
        self.durations.get_or_create(&method).observe(s.duration.as_secs_f64());
        self.sent_bytes.get_or_create(&plane).inc_by(s.sent_bytes);
        self.received_bytes.get_or_create(&plane).inc_by(s.received_bytes);
        self.sent_batches.get_or_create(&plane).inc_by(s.sent_batches);
        self.received_batches.get_or_create(&plane).inc_by(s.received_batches);
    }

    /// A connection on `plane` opened; the gauge falls again when the guard drops.
    pub(crate) fn connection(&self, plane: &'static str) -> OpenConnection {
        let gauge = self.connections.get_or_create(&PlaneLabel { plane }).clone();
        gauge.inc();
        OpenConnection(gauge)
    }

    /// Client connections open now on `plane`.
    pub(crate) fn open_connections(&self, plane: &'static str) -> i64 {
        self.connections.get_or_create(&PlaneLabel { plane }).get()
    }

    /// A failed login (`password`), bearer token (`token`), or data-plane grant (`grant`).
    pub(crate) fn auth_failed(&self, reason: &'static str) {
        self.auth_failures.get_or_create(&ReasonLabel { reason }).inc();
    }

    pub(crate) fn refused_call(&self, why: Refusal) {
        self.refused_calls.get_or_create(&ReasonLabel { reason: why.reason() }).inc();
    }

    pub(crate) fn refused_connection(&self, why: Refusal) {
        self.refused_connections.get_or_create(&ReasonLabel { reason: why.reason() }).inc();
    }

    /// The metrics in OpenMetrics' text format, as Prometheus scrapes them.
    pub(crate) fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// Counts a connection as open while it lives.
pub(crate) struct OpenConnection(Gauge);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The handler's own figures ([`Handler::gauges`]), read at each scrape.
struct HandlerGauges(Arc<dyn Handler>);

impl fmt::Debug for HandlerGauges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HandlerGauges")
    }
}

impl Collector for HandlerGauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        for g in self.0.gauges() {
            let gauge = ConstGauge::new(g.value);
            let metric = encoder.encode_descriptor(g.name, g.help, None, gauge.metric_type())?;
            gauge.encode(metric)?;
        }
        Ok(())
    }
}

/// A status code as gRPC names it (`NOT_FOUND`).
pub(crate) fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}
