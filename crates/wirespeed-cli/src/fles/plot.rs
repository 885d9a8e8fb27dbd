//! `fles plot run.json -o run.svg`: the three plots of the DFS paper from a run's report (a
//! real run's or a simulation's): bandwidth over time per input and in aggregate, the
//! distribution of timeslice completion times, and each compute node's buffer fill.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use clap::Args;
use plotters::prelude::*;
use serde_json::Value;

#[derive(Args)]
pub struct PlotArgs {
    /// A report from `fles run --report`.
    report: PathBuf,
    /// The SVG to write.
    #[arg(short, long)]
    output: PathBuf,
}

/// Points per bandwidth curve.
const BANDWIDTH_BINS: usize = 200;
const HISTOGRAM_BINS: usize = 60;

pub fn run(a: PlotArgs) -> Result<()> {
    let text = std::fs::read(&a.report).with_context(|| format!("reading {}", a.report.display()))?;
    let r: Value = serde_json::from_slice(&text).with_context(|| format!("{} is not a report", a.report.display()))?;
    if !r["computes"].is_array() || !r["inputs"].is_array() {
        return Err(anyhow!("{} is not a report of `fles run --report`", a.report.display()));
    }
    draw(&r, &a.output).map_err(|e| anyhow!("drawing {}: {e}", a.output.display()))
}

fn pairs(v: &Value) -> Vec<(f64, f64)> {
    v.as_array().map(|a| a.iter().filter_map(|p| Some((p[0].as_f64()?, p[1].as_f64()?))).collect()).unwrap_or_default()
}

/// The cumulative series `cum` (time, bytes) read at time `t`, linearly between samples.
fn at(cum: &[(f64, f64)], t: f64) -> f64 {
    match cum.iter().position(|&(x, _)| x >= t) {
        None => cum.last().map_or(0.0, |p| p.1),
        Some(0) => cum[0].1 * (t / cum[0].0.max(1e-12)).clamp(0.0, 1.0),
        Some(i) => {
            let ((x0, y0), (x1, y1)) = (cum[i - 1], cum[i]);
            y0 + (y1 - y0) * (t - x0) / (x1 - x0).max(1e-12)
        }
    }
}

/// GB/s in `bins` equal steps to `end`, from a cumulative byte count.
fn rates(cum: &[(f64, f64)], end: f64, bins: usize) -> Vec<(f64, f64)> {
    let w = end / bins as f64;
    (0..bins).map(|k| ((k as f64 + 0.5) * w, (at(cum, (k + 1) as f64 * w) - at(cum, k as f64 * w)) / w / 1e9)).collect()
}

type Drawn = std::result::Result<(), Box<dyn std::error::Error>>;

fn draw(r: &Value, out: &Path) -> Drawn {
    let run = &r["run"];
    let title = format!(
        "{} inputs, {} compute nodes, {} over {}: {} timeslices",
        run["inputs"],
        run["computes"],
        run["scheduler"].as_str().unwrap_or("?"),
        run["transport"].as_str().unwrap_or("?"),
        r["timeslices"]
    );
    let root = SVGBackend::new(out, (960, 1200)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(&title, ("sans-serif", 22))?;
    let areas = root.split_evenly((3, 1));
    let empty = Vec::new();
    let inputs = r["inputs"].as_array().unwrap_or(&empty);
    let computes = r["computes"].as_array().unwrap_or(&empty);

    // Bandwidth over time.
    let end = inputs.iter().flat_map(|i| pairs(&i["sent"])).map(|p| p.0).fold(1e-3, f64::max);
    let per_input: Vec<Vec<(f64, f64)>> =
        inputs.iter().map(|i| rates(&pairs(&i["sent"]), end, BANDWIDTH_BINS)).collect();
    let aggregate: Vec<(f64, f64)> = (0..BANDWIDTH_BINS)
        .map(|k| (per_input.first().map_or(0.0, |s| s[k].0), per_input.iter().map(|s| s[k].1).sum()))
        .collect();
    let top = aggregate.iter().map(|p| p.1).fold(1e-3, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(&areas[0])
        .caption("Bandwidth over time", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..end, 0.0..top)?;
    chart.configure_mesh().x_desc("seconds").y_desc("GB/s").draw()?;
    for (i, s) in per_input.into_iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(s, color.stroke_width(1)))?
            .label(format!("input {i}"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
    }
    chart
        .draw_series(LineSeries::new(aggregate, BLACK.stroke_width(2)))?
        .label("aggregate")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK.stroke_width(2)));
    chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw()?;

    // Completion times: from a timeslice's first contribution to its last.
    let ms: Vec<f64> = computes
        .iter()
        .flat_map(|c| c["completions"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| Some((c[2].as_f64()? - c[1].as_f64()?) / 1e6))
        .collect();
    let widest = ms.iter().copied().fold(1e-3, f64::max);
    let width = widest / HISTOGRAM_BINS as f64;
    let mut counts = vec![0u64; HISTOGRAM_BINS];
    for v in &ms {
        counts[((v / width) as usize).min(HISTOGRAM_BINS - 1)] += 1;
    }
    let share = |n: u64| 100.0 * n as f64 / ms.len().max(1) as f64;
    let highest = counts.iter().map(|&n| share(n)).fold(1.0, f64::max) * 1.1;
    let c = &r["completion_ms"];
    let caption = format!(
        "Timeslice completion time: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        c["p50"].as_f64().unwrap_or(0.0),
        c["p99"].as_f64().unwrap_or(0.0),
        c["max"].as_f64().unwrap_or(0.0)
    );
    let mut chart = ChartBuilder::on(&areas[1])
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..widest * 1.02, 0.0..highest)?;
    chart.configure_mesh().x_desc("milliseconds").y_desc("% of timeslices").draw()?;
    chart.draw_series(counts.iter().enumerate().map(|(k, &n)| {
        let x0 = k as f64 * width;
        Rectangle::new([(x0, 0.0), (x0 + width * 0.9, share(n))], BLUE.mix(0.7).filled())
    }))?;

    // Buffer fill.
    let mut chart = ChartBuilder::on(&areas[2])
        .caption("Buffer fill (the fullest ring of each compute node)", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..end, 0.0..100.0)?;
    chart.configure_mesh().x_desc("seconds").y_desc("% in use").draw()?;
    for (k, node) in computes.iter().enumerate() {
        let color = Palette99::pick(k).to_rgba();
        let fill: Vec<(f64, f64)> = pairs(&node["fill"]).into_iter().map(|(t, f)| (t, 100.0 * f)).collect();
        chart
            .draw_series(LineSeries::new(fill, color.stroke_width(1)))?
            .label(format!("compute node {}", node["index"]))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
    }
    chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_from_a_cumulative_count() {
        let cum = [(0.5, 1e9), (1.0, 3e9)];
        let r = rates(&cum, 1.0, 2);
        assert!((r[0].1 - 2.0).abs() < 1e-9, "{r:?}");
        assert!((r[1].1 - 4.0).abs() < 1e-9, "{r:?}");
    }
}
