//! SimGrid through `sim::engine`, on a platform simple enough to work out by hand. SimGrid runs
//! one simulation per process, so this file holds one test.
#![cfg(feature = "simgrid")]

use std::sync::{Arc, Mutex};

use wirespeed_fles::sim::{Comm, Engine, Mailbox, now, sleep_for};

/// Two hosts joined by one link of 1 GB/s and 10 µs.
const PLATFORM: &str = r#"<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<platform version="4.1">
  <zone id="world" routing="Full">
    <host id="a" speed="1Gf"/>
    <host id="b" speed="1Gf"/>
    <link id="wire" bandwidth="1GBps" latency="10us"/>
    <route src="a" dst="b"><link_ctn id="wire"/></route>
  </zone>
</platform>
"#;

#[test]
fn transfers_take_the_time_the_platform_says() {
    let dir = tempfile_dir();
    let platform = dir.join("two.xml");
    std::fs::write(&platform, PLATFORM).unwrap();
    // CM02 without cross traffic (acknowledgements taking bandwidth back): no correction
    // factors, so a transfer takes latency + size / bandwidth.
    let engine =
        Engine::start(&["--cfg=network/model:CM02", "--cfg=network/crosstraffic:0", "--log=root.thresh:critical"])
            .unwrap();
    assert!(Engine::start(&[]).is_err(), "one simulation per process");
    engine.load_platform(&platform).unwrap();
    assert!(engine.spawn("nowhere", "c", || {}).is_err(), "no such host");
    let got = Arc::new(Mutex::new(Vec::new()));
    let seen = got.clone();
    engine
        .spawn("sender", "a", || {
            let to_b = Mailbox::by_name("b").unwrap();
            to_b.put(String::from("one megabyte"), 1_000_000);
            sleep_for(1.0);
            to_b.put_async(7u64, 0).wait().unwrap();
        })
        .unwrap();
    engine
        .spawn("receiver", "b", move || {
            let mine = Mailbox::by_name("b").unwrap();
            let first: String = mine.get().unwrap();
            let arrived = now();
            let mut waiting = vec![mine.get_async()];
            let (_, next) = Comm::wait_any(&mut waiting).unwrap();
            assert!(waiting.is_empty());
            let second: u64 = next.value().unwrap();
            seen.lock().unwrap().push((first, arrived, second, now()));
        })
        .unwrap();
    engine.run().unwrap();
    let got = got.lock().unwrap();
    let (first, arrived, second, last) = &got[0];
    assert_eq!((first.as_str(), *second), ("one megabyte", 7));
    // 10 µs + 10^6 B / 10^9 B/s = 1.010 ms.
    assert!((arrived - 1.010e-3).abs() < 1e-9, "{arrived}");
    // Sent at 1.001010 s; an empty message takes the latency alone.
    assert!((last - (1.0 + 1.010e-3 + 10e-6)).abs() < 1e-9, "{last}");
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("wirespeed-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
