use std::time::Instant;

use clap::Args;

#[derive(Args)]
pub struct MemcpyArgs {
    /// Bytes per copy.
    #[arg(long, default_value_t = 1 << 20)]
    size: usize,
    /// Total bytes to copy.
    #[arg(long, default_value_t = 20 << 30)]
    total: u64,
    #[arg(long)]
    json: bool,
}

pub fn run(a: MemcpyArgs) -> anyhow::Result<()> {
    let src = vec![7u8; a.size];
    let mut dst = vec![0u8; a.size];
    let rounds = (a.total / a.size as u64).max(1);
    dst.copy_from_slice(&src); // fault the pages in first
    let t = Instant::now();
    for _ in 0..rounds {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
    }
    let mb_per_s = (rounds * a.size as u64) as f64 / t.elapsed().as_secs_f64() / 1e6;
    if a.json {
        println!("{}", serde_json::json!({ "memcpy_bytes": a.size, "mb_per_s": mb_per_s }));
    } else {
        println!("memcpy {} bytes: {:.0} MB/s", a.size, mb_per_s);
    }
    Ok(())
}
