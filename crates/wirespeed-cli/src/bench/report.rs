//! Results in the arrow-flight-benchmark style (MB = 10^6 bytes), or as one JSON object.

use serde_json::json;

pub struct Report {
    pub transport: String,
    pub message_bytes: usize,
    pub messages: u64,
    pub streams: usize,
    pub seconds: f64,
    /// One-way latency of each timed message (every one, or a sample), in nanoseconds.
    pub latencies_ns: Vec<u64>,
}

struct Latency {
    mean: f64,
    p50: f64,
    p95: f64,
    p99: f64,
    max: f64,
}

impl Latency {
    fn print(&self) {
        println!("Latency mean: {:.1} us", self.mean);
        println!("Latency quantile=0.5: {:.1} us", self.p50);
        println!("Latency quantile=0.95: {:.1} us", self.p95);
        println!("Latency quantile=0.99: {:.1} us", self.p99);
        println!("Latency max: {:.1} us", self.max);
    }
}

impl Report {
    fn mb_per_s(&self) -> f64 {
        (self.messages * self.message_bytes as u64) as f64 / self.seconds / 1e6
    }

    fn msgs_per_s(&self) -> f64 {
        self.messages as f64 / self.seconds
    }

    fn latency(&mut self) -> Latency {
        let l = &mut self.latencies_ns;
        l.sort_unstable();
        if l.is_empty() {
            return Latency { mean: 0.0, p50: 0.0, p95: 0.0, p99: 0.0, max: 0.0 };
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        let q = |p: f64| us(l[((l.len() - 1) as f64 * p).round() as usize]);
        Latency {
            mean: l.iter().map(|&x| x as f64).sum::<f64>() / l.len() as f64 / 1000.0,
            p50: q(0.5),
            p95: q(0.95),
            p99: q(0.99),
            max: us(*l.last().expect("non-empty")),
        }
    }

    pub fn print(mut self, as_json: bool) {
        let lat = self.latency();
        if as_json {
            let v = json!({
                "transport": self.transport,
                "message_bytes": self.message_bytes,
                "messages": self.messages,
                "streams": self.streams,
                "seconds": self.seconds,
                "mb_per_s": self.mb_per_s(),
                "msgs_per_s": self.msgs_per_s(),
                "latency_us": { "mean": lat.mean, "p50": lat.p50, "p95": lat.p95, "p99": lat.p99, "max": lat.max },
            });
            println!("{v}");
            return;
        }
        println!("Testing transport: {}", self.transport);
        println!("Message size: {}", self.message_bytes);
        println!("Streams: {}", self.streams);
        println!("Messages sent: {}", self.messages);
        println!("Bytes sent: {}", self.messages * self.message_bytes as u64);
        println!("Nanos: {}", (self.seconds * 1e9) as u64);
        println!("Speed: {:.1} MB/s", self.mb_per_s());
        println!("Throughput: {:.1} messages/s", self.msgs_per_s());
        lat.print();
    }
}

impl Report {
    /// arrow-flight-benchmark's lines: Speed in MiB/s, like the C++ tool, over `bytes` of data.
    pub fn print_flight(mut self, put: bool, bytes: u64, as_json: bool) {
        let lat = self.latency();
        let (method, verb) = if put { ("DoPut", "written") } else { ("DoGet", "read") };
        let mib_per_s = bytes as f64 / self.seconds / (1 << 20) as f64;
        if as_json {
            let v = json!({
                "method": method,
                "transport": self.transport,
                "batch_bytes": self.message_bytes,
                "batches": self.messages,
                "bytes": bytes,
                "streams": self.streams,
                "seconds": self.seconds,
                "mib_per_s": mib_per_s,
                "mb_per_s": bytes as f64 / self.seconds / 1e6,
                "batches_per_s": self.msgs_per_s(),
                "latency_us": { "mean": lat.mean, "p50": lat.p50, "p95": lat.p95, "p99": lat.p99, "max": lat.max },
            });
            println!("{v}");
            return;
        }
        println!("Testing method: {method}");
        println!("Transport: {}", self.transport);
        println!("Number of concurrent gets/puts: {}", self.streams);
        println!("Batch size: {}", self.message_bytes);
        println!("Batches {verb}: {}", self.messages);
        println!("Bytes {verb}: {bytes}");
        println!("Nanos: {}", (self.seconds * 1e9) as u64);
        println!("Speed: {mib_per_s:.3} MB/s");
        println!("Throughput: {:.3} batches/s", self.msgs_per_s());
        lat.print();
    }
}
