//! `fles simulate`: the real inputs, compute nodes and schedulers as SimGrid actors. Each
//! simulation is its own process (SimGrid runs one per process).

use std::process::{Command, Output};

use serde_json::Value;

/// One switch, 1 GB/s and 1 µs each way on every host's link; CM02 without cross traffic, so
/// a transfer takes its route's latency plus its size over its share of the bandwidth.
const SWITCH: [&str; 4] =
    ["--platform=switch:1GBps:1us", "--sim-cfg=network/model:CM02", "--sim-cfg=network/crosstraffic:0", "--nodes=16"];

fn simulate(args: &[&str]) -> (Output, Option<Value>) {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("sim.json");
    let out = Command::new(env!("CARGO_BIN_EXE_wirespeed"))
        .args(["fles", "simulate", &format!("--report={}", report.display())])
        .args(args)
        .output()
        .unwrap();
    let r = std::fs::read(&report).ok().map(|b| serde_json::from_slice(&b).unwrap());
    (out, r)
}

fn simulated(args: &[&str]) -> Value {
    let (out, r) = simulate(args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("timeslices in") && text.contains(" hosts) in "), "{text}");
    r.expect("a report")
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap()
}

/// Every compute node's timeslices, in the order it completed them.
fn built(r: &Value) -> Vec<Vec<u64>> {
    let computes = r["computes"].as_array().unwrap();
    computes
        .iter()
        .map(|c| c["completions"].as_array().unwrap().iter().map(|t| t[0].as_u64().unwrap()).collect())
        .collect()
}

fn all_once(r: &Value, timeslices: u64) {
    let mut all: Vec<u64> = built(r).concat();
    all.sort_unstable();
    assert_eq!(all, (0..timeslices).collect::<Vec<_>>(), "every timeslice once, none lost");
}

#[test]
fn round_robin_on_one_switch_takes_the_time_worked_out_by_hand() {
    let r = simulated(
        &[&SWITCH[..], &["--scheduler=rr", "--timeslices=64", "--in-flight=1", "--buffer-size=1048576"]].concat(),
    );
    // 8 inputs send each timeslice's components at once to its compute node, whose link
    // they share: a component is 65,536 bytes, its descriptor 32 and the status message 17,
    // so each round takes 2 µs + 8 × 65,585 B / 1 GB/s = 526.68 µs. The inputs finish with
    // the last acknowledgements: 8 of 17 bytes share the compute node's link back.
    let round = 2e-6 + 8.0 * 65_585.0 / 1e9;
    let seconds = 64.0 * round + 2e-6 + 8.0 * 17.0 / 1e9;
    assert!((f(&r["seconds"]) - seconds).abs() < 1e-9, "{} s, not {seconds}", r["seconds"]);
    assert!((f(&r["aggregate_gbps"]) - 8.0 * 64.0 * 65_536.0 / seconds / 1e9).abs() < 1e-9);
    assert_eq!(r["timeslices"], 64);
    // Each compute node builds timeslice c, c + 8, ... in order, its k-th after k + 1 rounds,
    // all components arriving together.
    for (c, got) in built(&r).iter().enumerate() {
        assert_eq!(got, &(0..8).map(|k| c as u64 + 8 * k).collect::<Vec<_>>());
    }
    let completions = r["computes"][3]["completions"].as_array().unwrap();
    for (k, t) in completions.iter().enumerate() {
        let at = f(&t[2]) / 1e9;
        assert!((at - (3 + 8 * k + 1) as f64 * round).abs() < 1e-9, "timeslice {} at {at}", t[0]);
        assert_eq!(t[1], t[2]);
    }
    assert_eq!(f(&r["completion_ms"]["max"]), 0.0);
    // Seven of eight components wait for the eighth: one component in a 1 MiB ring.
    assert_eq!(f(&r["buffer_fill_max"]), 65_536.0 / 1_048_576.0);
}

#[test]
fn a_bandwidth_drop_slows_the_run_by_its_share_while_it_lasts() {
    let base = [&SWITCH[..], &["--scheduler=rr", "--timeslices=64", "--in-flight=1"]].concat();
    let r = simulated(&[&base[..], &["--event=drop:0-10:0.25"]].concat());
    let round = 2e-6 + 8.0 * 65_585.0 / 0.75e9;
    let seconds = 64.0 * round + 2e-6 + 8.0 * 17.0 / 0.75e9;
    assert!((f(&r["seconds"]) - seconds).abs() < 1e-9, "{} s, not {seconds}", r["seconds"]);
    // Only the links named: compute node 0 (on the second host) receives at half speed, so
    // its 8 rounds of 64 take twice as long.
    let r = simulated(&[&base[..], &["--event=drop:0-10:0.5:switch_link_1_DOWN"]].concat());
    let (round, slow) = (2e-6 + 8.0 * 65_585.0 / 1e9, 2e-6 + 8.0 * 65_585.0 / 0.5e9);
    let seconds = 56.0 * round + 8.0 * slow + 2e-6 + 8.0 * 17.0 / 1e9;
    assert!((f(&r["seconds"]) - seconds).abs() < 1e-9, "{} s, not {seconds}", r["seconds"]);
}

#[test]
fn the_dfs_builds_every_timeslice_once_in_order_and_learns_its_intervals() {
    let r = simulated(&[&SWITCH[..], &["--scheduler=dfs", "--timeslices=400", "--interval-length=16"]].concat());
    all_once(&r, 400);
    for (c, got) in built(&r).iter().enumerate() {
        assert_eq!(got, &(0..50).map(|k| c as u64 + 8 * k).collect::<Vec<_>>(), "compute node {c} in order");
    }
    // 400 timeslices in intervals of 2 rounds of 8: 25 intervals.
    assert_eq!(r["computes"][0]["intervals"].as_array().unwrap().len(), 25);
    assert_eq!(r["computes"][0]["intervals"], r["computes"][7]["intervals"]);
    // `fles plot` draws it as it draws a real run.
    let dir = tempfile::tempdir().unwrap();
    let (report, svg) = (dir.path().join("sim.json"), dir.path().join("sim.svg"));
    std::fs::write(&report, r.to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_wirespeed"))
        .args(["fles", "plot", &report.display().to_string(), "-o", &svg.display().to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
}

#[test]
fn inputs_paced_at_a_data_rate_build_every_timeslice_and_take_the_datas_time() {
    // Paced inputs finish at different moments, while compute nodes still send them
    // proposals: messages to an actor that ended must not break the run.
    for scheduler in ["rr", "dfs"] {
        let r = simulated(&[
            "--platform=xc40",
            "--nodes=16",
            &format!("--scheduler={scheduler}"),
            "--timeslices=80",
            "--interval-length=16",
            "--in-flight=1",
            "--rate=1",
        ]);
        all_once(&r, 80);
        // Each input's 80 components of 64 KiB at 1 GB/s take 5.24 ms to arrive.
        assert!(f(&r["seconds"]) >= 80.0 * 65536.0 / 1e9, "{scheduler}: {}", r["seconds"]);
    }
}

#[test]
fn a_compute_node_turned_off_loses_no_timeslice_and_duplicates_none() {
    for scheduler in ["rr", "dfs"] {
        let r = simulated(
            &[
                &SWITCH[..],
                &[
                    &format!("--scheduler={scheduler}"),
                    "--timeslices=400",
                    "--interval-length=16",
                    "--event=off:compute:3@0.002",
                ],
            ]
            .concat(),
        );
        assert_eq!(r["lost_computes"], serde_json::json!([3]), "{scheduler}");
        assert_eq!(r["computes"].as_array().unwrap().len(), 7);
        // What compute node 3 had built before it went off counts, and nothing else of it.
        assert!(r["timeslices"].as_u64().unwrap() < 400);
        let mut all: Vec<u64> = built(&r).concat();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len() as u64, r["timeslices"].as_u64().unwrap(), "none twice ({scheduler})");
        let missing: Vec<u64> = (0..400).filter(|t| all.binary_search(t).is_err()).collect();
        assert!(missing.iter().all(|t| t % 8 == 3 && *t < 400 / 2), "only node 3's early ones: {missing:?}");
    }
}

/// Nodes find a peer turned off by its silence alone, as real nodes do (the same detector):
/// beats every millisecond, a peer given up after 20 ms of silence. One that is only slow (its
/// link at a tenth for half of that) is waited for.
#[test]
fn the_detector_finds_the_silent_and_waits_for_the_slow() {
    let liveness = ["--heartbeat=0.001", "--timeout=0.04", "--scheduler=rr", "--timeslices=400"];
    let r = simulated(&[&SWITCH[..], &liveness, &["--event=off:compute:3@0.002"]].concat());
    assert_eq!(r["lost_computes"], serde_json::json!([3]));
    assert!(f(&r["seconds"]) > 0.002 + 0.02, "found after its silence: {}", r["seconds"]);
    let r = simulated(&[&SWITCH[..], &liveness, &["--event=drop:0.002-0.012:0.9:switch_link_7_DOWN"]].concat());
    assert_eq!(r["lost_computes"], serde_json::json!([]), "slow is not dead");
    all_once(&r, 400);
}

#[test]
fn an_input_turned_off_leaves_timeslices_incomplete_and_the_run_goes_on() {
    let r = simulated(
        &[&SWITCH[..], &["--scheduler=dfs", "--timeslices=400", "--interval-length=16", "--event=off:input:2@0.002"]]
            .concat(),
    );
    assert_eq!(r["lost_inputs"], serde_json::json!([2]));
    all_once(&r, 400);
    assert!(r["incomplete"].as_u64().unwrap() > 0);
}

#[test]
fn the_same_settings_give_the_same_run() {
    let run = |seed: &str| {
        let dfs = ["--scheduler=dfs", "--timeslices=200", "--interval-length=16", "--component-spread=30000", seed];
        simulated(&[&SWITCH[..], &dfs].concat())
    };
    let (a, b) = (run("--seed=9"), run("--seed=9"));
    for key in ["seconds", "completion_ms", "buffer_fill_max", "computes", "inputs"] {
        assert_eq!(a[key], b[key], "{key}");
    }
    assert_ne!(a["computes"], run("--seed=10")["computes"], "another seed, other sizes");
}

#[test]
fn bad_settings_get_one_clear_line() {
    for (args, says) in [
        (vec!["--nodes=16", "--platform=torus"], "expected xc40, fat-tree"),
        (vec!["--nodes=16", "--event=off:compute:9@1"], "there is no compute node 9"),
        (vec!["--nodes=16", "--event=drop:2-1:0.5"], "a drop that ends after it starts"),
        (vec!["--platform=missing.xml", "--nodes=4"], "no platform file"),
        (vec![], "say how many nodes"),
        (vec!["--nodes=4", "--timeslices=4", "--event=drop:0-1:0.5:nothing"], "no link's name holds"),
    ] {
        let (out, _) = simulate(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{args:?}: {err}");
    }
}
