//! Live metrics: points each node records every second, sent to InfluxDB, a file or a
//! Prometheus endpoint as FLESnet's monitor sinks do, so an operator watches a run in Grafana.

mod point;
mod sink;

pub use point::{Point, prometheus_text};
pub use sink::{Monitor, SinkSpec};
