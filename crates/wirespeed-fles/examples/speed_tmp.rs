use std::time::Instant;
use wirespeed_fles::model::{ComponentView, Slicing};
use wirespeed_fles::source::Pattern;
fn main() {
    let p = Pattern { input: 0, size: 480, spread: 0 };
    let s = Slicing { core: 127, overlap: 1 };
    let t = Instant::now();
    let mut total = 0;
    let mut last = Vec::new();
    for ts in 0..5000 {
        last = p.component(ts, s);
        total += last.len();
    }
    let e = t.elapsed().as_secs_f64();
    println!("generate: {:.2} GB/s", total as f64 / e / 1e9);
    let v = ComponentView::new(&last, 128).unwrap();
    let t = Instant::now();
    for _ in 0..5000 {
        v.verify(0).unwrap();
    }
    println!("verify: {:.2} GB/s", (5000 * last.len()) as f64 / t.elapsed().as_secs_f64() / 1e9);
    let t = Instant::now();
    let mut x = 0u32;
    for _ in 0..5000 {
        x ^= crc32c::crc32c(&last);
    }
    println!("crc32c: {:.2} GB/s {x}", (5000 * last.len()) as f64 / t.elapsed().as_secs_f64() / 1e9);
}
