//! Timeslice building between hosts, launched as a cluster launches it: `mpirun --host A,B,C`
//! on host A starts the ranks over ssh into three network-namespace hosts (tests/hosts.py),
//! Open MPI's own traffic (its daemons' out-of-band channel, its TCP BTL) named onto the bridge.
//! Inputs run on A, compute nodes on B and C.
#![cfg(feature = "mpi")]

mod support;

use std::process::Command;

use support::archives::{boost_tsa_reader, read_with_boost, wait_until_under_way, whole_timeslices};
use support::netns::Hosts;
use support::{BIN, Sshd};

/// `mpirun` on host A over `hosts`' sshds: two inputs on A, one compute node on each of B and C.
fn mpirun(hosts: &Hosts, sshd: &Sshd) -> Command {
    let mut c = hosts.command(0, "mpirun");
    let on = format!("{}:2,{}:1,{}:1", hosts.namespace(0), hosts.namespace(1), hosts.namespace(2));
    c.args(["--allow-run-as-root", "--host", &on, "-np", "4", "--bind-to", "none"]);
    // ssh that gives up a host that stopped answering, as mpirun waits for every ssh it started.
    let ssh = format!("{} -o ServerAliveInterval=1 -o ServerAliveCountMax=3", sshd.ssh_command());
    c.args(["--mca", "plm_rsh_agent", &ssh]);
    c.args(["--mca", "oob_tcp_if_include", &hosts.subnet, "--mca", "btl_tcp_if_include", &hosts.subnet]);
    // The hosts share one machine's /dev/shm and host name, where Open MPI's vader BTL would
    // take them for one node.
    c.args(["--mca", "btl", "self,tcp", "-x", "WIRESPEED_KEY"]);
    c.env("WIRESPEED_KEY", "the run's shared secret, between hosts");
    c
}

fn text(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn inputs_on_one_host_fill_compute_nodes_on_two_others() {
    let Some((hosts, sshd)) = Hosts::with_sshd(3) else { return };
    for transport in ["tcp", "ucx", "ofi+tcp"] {
        let dir = tempfile::tempdir().unwrap();
        let (b, c) = (hosts.received(1), hosts.received(2));
        let out = mpirun(&hosts, &sshd)
            .args([BIN, "fles", "run", "--inputs=2", "--timeslices=300", "--timeslice-size=20"])
            .arg(format!("--transport={transport}"))
            .arg(format!("--output=tsa:{}", dir.path().join("run.tsa").display()))
            .arg(format!("--report={}", dir.path().join("run.json").display()))
            .output()
            .expect("mpirun (the bootstrap installs Open MPI)");
        assert!(out.status.success(), "{transport}: {}", text(&out));
        let r: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("run.json")).unwrap()).unwrap();
        assert_eq!(r["timeslices"], 300, "{transport}");
        assert_eq!(r["incomplete"], 0, "{transport}");
        // FLESnet's classes load both archives, every CRC right: 300 timeslices between them.
        let reader = boost_tsa_reader(dir.path());
        let mut all = Vec::new();
        for n in 0..2 {
            let archive = dir.path().join(format!("run.{n}.tsa"));
            let text = read_with_boost(&reader, &archive);
            assert!(text.lines().last().unwrap().starts_with("ok "), "{transport}: {text}");
            all.extend(whole_timeslices(2, &reader, &archive));
        }
        all.sort_unstable();
        assert_eq!(all, (0..300).collect::<Vec<u64>>(), "{transport}");
        // The contributions crossed the bridge to B and C: 300 timeslices of 2 x 20 microslices.
        let (to_b, to_c) = (hosts.received(1) - b, hosts.received(2) - c);
        assert!(to_b > 1 << 20 && to_c > 1 << 20, "{transport}: {to_b} and {to_c} bytes");
    }
}

/// Under `--enable-recovery`, host C's link goes down mid-run: its compute node is lost alone,
/// B builds what C had not finished, and every timeslice is built (C's part file holds the ones
/// it finished).
#[test]
fn a_compute_host_whose_link_goes_down_is_lost_alone() {
    let Some((hosts, sshd)) = Hosts::with_sshd(3) else { return };
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("run.json");
    // A file, not a pipe: Open MPI says much once a daemon is cut off, and must not block on it.
    let log = dir.path().join("mpirun.log");
    let mut child = mpirun(&hosts, &sshd)
        .arg("--enable-recovery")
        .args([BIN, "fles", "run", "--inputs=2", "--timeslices=3000", "--timeslice-size=20", "--rate=0.02"])
        .args(["--timeout=6", "--transport=tcp"])
        .arg(format!("--output=tsa:{}", dir.path().join("run.tsa").display()))
        .arg(format!("--report={}", report.display()))
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::options().append(true).open(&log).unwrap())
        .spawn()
        .unwrap();
    wait_until_under_way(dir.path());
    hosts.link(2, "down");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "mpirun still runs: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let stderr = std::fs::read_to_string(&log).unwrap();
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap_or_else(|e| {
        panic!("no report ({e}): {stderr}");
    });
    assert_eq!(r["lost_computes"], serde_json::json!([1]), "{stderr}");
    assert_eq!(r["lost_inputs"], serde_json::json!([]), "{stderr}");
    assert_eq!(r["incomplete"], 0);
    let reader = boost_tsa_reader(dir.path());
    let built = whole_timeslices(2, &reader, &dir.path().join("run.0.tsa"));
    assert_eq!(r["timeslices"], built.len() as u64);
    let mut all = built.clone();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), built.len(), "B built each timeslice once");
    // C, cut off but alive, went on building the timeslices whose contributions it had, and
    // could tell no one: B built those again. Its part file never looks complete.
    all.extend(whole_timeslices(2, &reader, &dir.path().join(".run.1.tsa.part")));
    all.sort_unstable();
    all.dedup();
    assert_eq!(all, (0..3000).collect::<Vec<u64>>(), "none lost");
    assert!(!dir.path().join("run.1.tsa").exists());
}
