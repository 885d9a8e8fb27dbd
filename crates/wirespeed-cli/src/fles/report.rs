//! The run's report: the nodes' summaries merged into the figures users look at (completion
//! times, aggregate bandwidth, buffer fill) and the time series behind them.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use serde_json::{Value, json};

/// Prints the report's lines for people and writes it if asked.
pub fn publish(r: &Value, path: Option<&Path>) -> Result<()> {
    // A reader that stops early (`| head -1`) is no failure of the run.
    let _ = writeln!(std::io::stdout(), "{}", describe(r));
    if let Some(path) = path {
        std::fs::write(path, serde_json::to_vec_pretty(r)?).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The value at quantile `q` of sorted `v` (nearest rank); 0 if empty.
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

fn f(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or(0.0)
}

/// Merges the inputs' and compute nodes' summaries (as `node` prints them).
pub fn build(description: Value, summaries: &[Value]) -> Value {
    let by_role = |r: &'static str| summaries.iter().filter(move |s| s["role"] == r);
    let mut completion_ms: Vec<f64> = by_role("compute")
        .flat_map(|s| s["completions"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| Some((c[2].as_f64()? - c[1].as_f64()?) / 1e6))
        .collect();
    completion_ms.sort_by(f64::total_cmp);
    let bytes: f64 = by_role("input").map(|s| f(s, "bytes")).sum();
    let seconds = by_role("input").map(|s| f(s, "seconds")).fold(0.0, f64::max);
    let fill_max = by_role("compute")
        .flat_map(|s| s["fill"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p[1].as_f64())
        .fold(0.0, f64::max);
    let timeslices: u64 = by_role("compute").map(|s| s["timeslices"].as_u64().unwrap_or(0)).sum();
    json!({
        "run": description,
        "timeslices": timeslices,
        "incomplete": by_role("compute").map(|s| s["incomplete"].as_u64().unwrap_or(0)).sum::<u64>(),
        "lost_inputs": lost(by_role("compute"), "lost_inputs"),
        "lost_computes": lost(summaries.iter(), "lost_computes"),
        "seconds": seconds,
        "completion_ms": {
            "p50": quantile(&completion_ms, 0.5),
            "p99": quantile(&completion_ms, 0.99),
            "max": by_role("compute").map(|s| f(s, "slowest_ns") / 1e6).fold(completion_ms.last().copied().unwrap_or(0.0), f64::max),
        },
        "aggregate_gbps": if seconds > 0.0 { bytes / seconds / 1e9 } else { 0.0 },
        "buffer_fill_max": fill_max,
        "inputs": by_role("input").map(|s| json!({"index": s["index"], "bytes": s["bytes"], "sent": s["sent"]})).collect::<Vec<_>>(),
        "computes": by_role("compute").map(|s| json!({
            "index": s["index"], "timeslices": s["timeslices"], "fill": s["fill"],
            "completions": s["completions"], "intervals": s["intervals"], "frames": s["frames"],
        })).collect::<Vec<_>>(),
    })
}

/// The nodes any summary names under `key`, once each.
fn lost<'a>(summaries: impl Iterator<Item = &'a Value>, key: &str) -> std::collections::BTreeSet<u64> {
    summaries.flat_map(|s| s[key].as_array().cloned().unwrap_or_default()).filter_map(|v| v.as_u64()).collect()
}

/// Two lines for people, and one per kind of node lost.
pub fn describe(r: &Value) -> String {
    let c = &r["completion_ms"];
    let list = |key: &str| match r[key].as_array() {
        Some(l) if !l.is_empty() => Some(l.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")),
        _ => None,
    };
    let mut more = String::new();
    if let Some(l) = list("lost_inputs") {
        more += &format!("\ninputs lost: {l}; {} timeslices incomplete", r["incomplete"]);
    }
    if let Some(l) = list("lost_computes") {
        more += &format!("\ncompute nodes lost: {l}; the others took over the timeslices they had not finished");
    }
    // Frames built on a GPU: one line per compute node.
    for c in r["computes"].as_array().into_iter().flatten().filter(|c| c["frames"].is_object()) {
        let fr = &c["frames"];
        more += &format!(
            "\ncompute node {}: {} frames on {} ({}), {:.0} frames/s, ready after the last component p50 {:.0} µs, p99 {:.0} µs; {} microslices checked there",
            c["index"],
            fr["built"],
            fr["device"].as_str().unwrap_or("?"),
            fr["path"].as_str().unwrap_or("?"),
            f(fr, "frames_per_s"),
            f(&fr["ready_us"], "p50"),
            f(&fr["ready_us"], "p99"),
            fr["microslices_checked"],
        );
    }
    let sim = &r["run"]["simulation"];
    if sim.is_object() {
        more += &format!(
            "\nsimulated {:.3} s on {} ({} hosts) in {:.1} s, peak memory {:.0} MiB",
            f(sim, "simulated_s"),
            sim["platform"].as_str().unwrap_or("?"),
            sim["hosts"],
            f(sim, "wall_s"),
            f(sim, "peak_memory_mib"),
        );
    }
    if let Some(mode) = r["run"]["verify"].as_str().filter(|m| *m != "all") {
        more += &format!("\nCRCs checked by the compute nodes: {mode} (--verify {mode})");
    }
    if r["recovery"].is_object() {
        more += &format!("\n{}", describe_recovery(&r["recovery"]));
    }
    format!(
        "{} timeslices in {:.2} s, {:.2} GB/s aggregate\ncompletion p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; buffer fill max {:.0} %{more}",
        r["timeslices"],
        f(r, "seconds"),
        f(r, "aggregate_gbps"),
        f(c, "p50"),
        f(c, "p99"),
        f(c, "max"),
        100.0 * f(r, "buffer_fill_max"),
    )
}

/// How a simulated run's DFS intervals came back after a bandwidth drop.
fn describe_recovery(r: &Value) -> String {
    let ms = |k: &str| r[k].as_f64().map_or("-".into(), |v| format!("{v:.3} ms"));
    let (before, during) = (ms("median_before_ms"), ms("median_during_ms"));
    match r["intervals_to_recover"].as_u64() {
        Some(n) => format!(
            "bandwidth drop: intervals took {before} before, {during} during; back within 10 % {n} intervals after it ended"
        ),
        None => format!(
            "bandwidth drop: intervals took {before} before, {during} during; not back within 10 % in the {} intervals after it",
            r["intervals_after"]
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_summaries() {
        let s = [
            json!({"role": "input", "index": 0, "bytes": 2e9, "seconds": 2.0, "sent": []}),
            json!({"role": "input", "index": 1, "bytes": 2e9, "seconds": 1.0, "sent": []}),
            json!({"role": "compute", "index": 0, "timeslices": 2, "completions": [[0, 0, 1_000_000], [2, 0, 3_000_000]],
                   "fill": [[0.0, 0.25], [0.1, 0.5]], "intervals": []}),
        ];
        let r = build(json!({}), &s);
        assert_eq!(r["timeslices"], 2);
        assert_eq!(r["aggregate_gbps"], 2.0);
        assert_eq!(r["completion_ms"]["p50"], 1.0);
        assert_eq!(r["completion_ms"]["max"], 3.0);
        assert_eq!(r["buffer_fill_max"], 0.5);
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }
}
