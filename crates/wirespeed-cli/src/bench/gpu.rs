//! `wirespeed bench gpu`: how fast timeslices are built in GPU memory. First the limits: the
//! host-to-device copy bandwidth from pinned memory (and from pageable memory, for
//! reference), and from pinned memory one component at a time, each copy waited for (what an
//! input putting into GPU rings does). Then end to end, I input processes feeding one compute
//! node that builds every timeslice in the GPU's memory and checks every microslice's CRC
//! there, over each transport, for I from 1 to 8 (where lightning-kit's throughput
//! collapsed), with the rings in host memory and in GPU memory, beside the same run building
//! on the CPU. The inputs replay an archive written first, so that making microslices (and
//! their CRCs) does not limit what one input sends.

use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::{Value, json};
use wirespeed::gpu::Gpu;
use wirespeed_fles::frames::gpu_error;

#[derive(Args)]
pub struct GpuArgs {
    /// The GPU's number.
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// Input processes, one run each.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    inputs: Vec<usize>,
    #[arg(long, value_delimiter = ',', default_value = "shm,tcp")]
    transports: Vec<String>,
    /// Where the receive rings live, one run each: "host" (page-locked, copied to the GPU by
    /// DMA) and "gpu" (`--gpu-rings`: the inputs put into GPU memory where the fabric can).
    #[arg(long, value_delimiter = ',', default_value = "host,gpu")]
    rings: Vec<String>,
    /// dfs or rr.
    #[arg(long, default_value = "dfs")]
    scheduler: String,
    /// Core microslices per timeslice: 1600 of 650 bytes make components of about 1 MiB.
    #[arg(long, default_value_t = 1600)]
    timeslice_size: u64,
    #[arg(long, default_value_t = 650)]
    microslice_size: u32,
    /// Data ring per input: small enough to stay in cache, where one input copies fastest.
    #[arg(long, default_value_t = 8 << 20)]
    buffer_size: u64,
    /// Bytes each run moves, all inputs together.
    #[arg(long, default_value_t = 4_000_000_000)]
    bytes: u64,
    /// Bytes per copy when measuring the limit.
    #[arg(long, default_value_t = 64 << 20)]
    copy_size: usize,
    /// Write the figures here as JSON.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

pub fn run(a: GpuArgs) -> Result<()> {
    let gpu = Gpu::open(a.device).map_err(gpu_error)?;
    println!("device {}: {}", a.device, gpu.name());
    let (pinned, pageable) = copy_limits(&gpu, a.copy_size)?;
    println!(
        "host to device, {} MiB copies: {pinned:.2} GB/s from pinned memory, {pageable:.2} GB/s from pageable",
        a.copy_size >> 20
    );
    let component = (a.timeslice_size + 1) * (32 + a.microslice_size as u64);
    let each = one_by_one(&gpu, component as usize)?;
    println!("host to device, {component}-byte copies from pinned memory, each waited for: {each:.2} GB/s");
    drop(gpu);
    let raw = raw_shm()?;
    // Host rings pass every byte through shared memory; GPU rings only through the copy engines.
    println!("bench raw over shm, 1 MiB messages: {raw:.2} GB/s; runs are compared with pinned copies ({pinned:.2})");
    let dir = std::env::temp_dir().join(format!("wirespeed-bench-gpu-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let archive = dir.join("replay.tsa");
    let made = fles(&a, &["--local=1:1", "--timeslices=64", &format!("--output=tsa:{}", archive.display())], &dir);
    made.context("writing the archive the inputs replay")?;
    println!(
        "components of {component} bytes, replayed; every microslice's CRC-32C checked on the GPU (GB/s) or the CPU"
    );
    println!(
        "{:<9} {:>6} {:>8} {:>8} {:>9} {:>11} {:>11} {:>8}  path",
        "transport", "inputs", "GB/s", "÷ pinned", "frames/s", "ready p50", "ready p99", "CPU GB/s"
    );
    let mut runs = Vec::new();
    for t in &a.transports {
        for &i in &a.inputs {
            let timeslices = (a.bytes / (i as u64 * component)).max(100);
            let mut args = vec![
                format!("--local={i}:1"),
                format!("--transport={t}"),
                format!("--timeslices={timeslices}"),
                format!("--replay={}", archive.display()),
                format!("--buffer-size={}", a.buffer_size),
            ];
            let cpu = fles(&a, &args, &dir).with_context(|| format!("{t} with {i} inputs, on the CPU"))?;
            args.extend([format!("--gpu={}", a.device), format!("--frame-bytes={}", i as u64 * (component + 256))]);
            for rings in &a.rings {
                let mut args = args.clone();
                match rings.as_str() {
                    "host" => {}
                    "gpu" => args.push("--gpu-rings".into()),
                    other => bail!("--rings {other}: host or gpu"),
                }
                let r = fles(&a, &args, &dir).with_context(|| format!("{t} with {i} inputs, {rings} rings"))?;
                let fr = &r["computes"][0]["frames"];
                let gbps = r["aggregate_gbps"].as_f64().unwrap_or(0.0);
                println!(
                    "{:<9} {:>6} {:>8.2} {:>8.2} {:>9.0} {:>8.0} µs {:>8.0} µs {:>8.2}  {}",
                    t,
                    i,
                    gbps,
                    gbps / pinned,
                    fr["frames_per_s"].as_f64().unwrap_or(0.0),
                    fr["ready_us"]["p50"].as_f64().unwrap_or(0.0),
                    fr["ready_us"]["p99"].as_f64().unwrap_or(0.0),
                    cpu["aggregate_gbps"].as_f64().unwrap_or(0.0),
                    fr["path"].as_str().unwrap_or("?"),
                );
                runs.push(json!({"transport": t, "inputs": i, "rings": rings, "report": r, "cpu_report": cpu}));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if let Some(path) = &a.json {
        let all = json!({
            "pinned_gbps": pinned, "pageable_gbps": pageable, "pinned_one_by_one_gbps": each, "raw_shm_gbps": raw,
            "component_bytes": component, "runs": runs,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&all)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// GB/s copying `len` bytes at a time from pinned memory, waiting for each copy before the
/// next, as an input putting into GPU rings does: one input's ceiling there.
fn one_by_one(gpu: &Gpu, len: usize) -> Result<f64> {
    const ROUNDS: usize = 512;
    let device = gpu.alloc(len).map_err(gpu_error)?;
    let pinned = gpu.alloc_pinned(len).map_err(gpu_error)?;
    let stream = gpu.stream().map_err(gpu_error)?;
    let start = std::time::Instant::now();
    for _ in 0..ROUNDS {
        // SAFETY: the source outlives the synchronisation right after.
        unsafe { stream.copy_to_device(&device, 0, pinned.as_slice()) }.map_err(gpu_error)?;
        stream.synchronize().map_err(gpu_error)?;
    }
    Ok((ROUNDS * len) as f64 / start.elapsed().as_secs_f64() / 1e9)
}

/// GB/s copying host to device from pinned and from pageable memory, timed with events.
fn copy_limits(gpu: &Gpu, size: usize) -> Result<(f64, f64)> {
    const ROUNDS: usize = 16;
    let device = gpu.alloc(size).map_err(gpu_error)?;
    let mut pinned = gpu.alloc_pinned(size).map_err(gpu_error)?;
    pinned.as_mut_slice().fill(7);
    let pageable = vec![7u8; size];
    let stream = gpu.stream().map_err(gpu_error)?;
    let time = |src: &[u8]| -> Result<f64> {
        // SAFETY: both sources outlive the synchronisation below.
        unsafe { stream.copy_to_device(&device, 0, src) }.map_err(gpu_error)?; // warm up
        let start = stream.record().map_err(gpu_error)?;
        for _ in 0..ROUNDS {
            // SAFETY: as above.
            unsafe { stream.copy_to_device(&device, 0, src) }.map_err(gpu_error)?;
        }
        let end = stream.record().map_err(gpu_error)?;
        end.wait().map_err(gpu_error)?;
        let ms = end.since(&start).map_err(gpu_error)? as f64;
        Ok((ROUNDS * size) as f64 / (ms / 1e3) / 1e9)
    };
    Ok((time(pinned.as_slice())?, time(&pageable)?))
}

/// GB/s of `bench raw` over shm with 1 MiB messages: what one host's shared memory carries.
fn raw_shm() -> Result<f64> {
    let out = Command::new(std::env::current_exe()?)
        .args(["bench", "raw", "--transport=shm", "--size=1048576", "--count=20000"])
        .output()?;
    if !out.status.success() {
        bail!("bench raw failed ({})", out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let speed = text.lines().find_map(|l| l.strip_prefix("Speed: ")?.strip_suffix(" MB/s")?.parse::<f64>().ok());
    speed.map(|mb| mb / 1e3).context("bench raw printed no speed")
}

/// One `fles run` with the bench's slicing and these flags, and its report.
fn fles(a: &GpuArgs, flags: &[impl AsRef<std::ffi::OsStr>], dir: &std::path::Path) -> Result<Value> {
    let report = dir.join("report.json");
    let status = Command::new(std::env::current_exe()?)
        .args(["fles", "run"])
        .args(flags)
        .arg(format!("--scheduler={}", a.scheduler))
        .arg(format!("--timeslice-size={}", a.timeslice_size))
        .arg(format!("--microslice-size={}", a.microslice_size))
        .arg(format!("--report={}", report.display()))
        .stdout(std::process::Stdio::null())
        .status()?;
    if !status.success() {
        bail!("the run failed ({status})");
    }
    Ok(serde_json::from_slice(&std::fs::read(&report)?)?)
}
