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

/// The run of the fault tests, under `--enable-recovery`, with its output in `dir/mpirun.log`
/// (a file, not a pipe: Open MPI says much once a daemon is cut off, and must not block on it).
fn start_recoverable_run(hosts: &Hosts, sshd: &Sshd, dir: &std::path::Path) -> std::process::Child {
    let log = dir.join("mpirun.log");
    mpirun(hosts, sshd)
        .arg("--enable-recovery")
        .args([BIN, "fles", "run", "--inputs=2", "--timeslices=3000", "--timeslice-size=20", "--rate=0.02"])
        .args(["--timeout=6", "--transport=tcp"])
        .arg(format!("--output=tsa:{}", dir.join("run.tsa").display()))
        .arg(format!("--report={}", dir.join("run.json").display()))
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::options().append(true).open(&log).unwrap())
        .spawn()
        .unwrap()
}

/// Waits at most two minutes for mpirun to end; its status and what it said.
fn ended(mut child: std::process::Child, dir: &std::path::Path) -> (std::process::ExitStatus, String) {
    let log = || std::fs::read_to_string(dir.join("mpirun.log")).unwrap_or_default();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status, log());
        }
        assert!(std::time::Instant::now() < deadline, "mpirun still runs: {}", log());
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Under `--enable-recovery`, host C fails mid-run: its compute node is lost alone, B builds
/// what C had not finished, and every timeslice is built (C's part file holds the ones it
/// finished). SimGrid's run of the same fault writes the same report.
fn compute_host_fails(fault: impl FnOnce(&Hosts)) {
    let Some((hosts, sshd)) = Hosts::with_sshd(3) else { return };
    let dir = tempfile::tempdir().unwrap();
    let child = start_recoverable_run(&hosts, &sshd, dir.path());
    wait_until_under_way(dir.path());
    fault(&hosts);
    let (_, stderr) = ended(child, dir.path());
    let r: serde_json::Value = std::fs::read(dir.path().join("run.json"))
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        .unwrap_or_else(|e| panic!("no report ({e}): {stderr}"));
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
    // C, cut off but alive, may have gone on building the timeslices whose contributions it
    // had, and could tell no one: B built those again. Its part file never looks complete.
    let part = dir.path().join(".run.1.tsa.part");
    if part.exists() {
        all.extend(whole_timeslices(2, &reader, &part));
    }
    all.sort_unstable();
    all.dedup();
    assert_eq!(all, (0..3000).collect::<Vec<u64>>(), "none lost");
    assert!(!dir.path().join("run.1.tsa").exists());
    same_report_as_simulated(&r);
}
/// `fles simulate` of the same run, compute node 1 turned off part way, reports the same
/// fields, the same losses and nothing incomplete.
fn same_report_as_simulated(real: &serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("sim.json");
    let out = Command::new(BIN)
        .args(["fles", "simulate", "--platform=switch:1GBps:1us", "--inputs=2", "--computes=2"])
        .args(["--timeslices=3000", "--timeout=6", "--event=off:compute:1@0.02"])
        .arg(format!("--report={}", report.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let sim: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let keys = |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(real), keys(&sim));
    for part in ["computes", "inputs"] {
        let (a, b) = (real[part].as_array().unwrap(), sim[part].as_array().unwrap());
        assert_eq!(a.len(), b.len(), "{part}");
        assert!(a.iter().zip(b).all(|(a, b)| keys(a) == keys(b)), "{part}");
    }
    for field in ["lost_computes", "lost_inputs", "incomplete"] {
        assert_eq!(real[field], sim[field], "{field}");
    }
}

#[test]
fn a_compute_host_whose_link_goes_down_is_lost_alone() {
    compute_host_fails(|hosts| hosts.link(2, "down"));
}

#[test]
fn a_compute_host_whose_ranks_are_all_killed_is_lost_alone() {
    compute_host_fails(|hosts| hosts.kill(2, Some("wirespeed")));
}

/// Host C killed whole, Open MPI's daemon with it. mpirun then ends the job, `--enable-recovery`
/// or not (its errmgr: "Comm failure: daemon - aborting"), or, when the run ended first, may
/// wait for that daemon indefinitely: that is Open MPI's. Ours: every rank on A and B ends
/// soon, and every archive they leave reads back whole.
#[test]
fn a_compute_host_killed_whole_leaves_no_rank_waiting_and_every_archive_whole() {
    let Some((hosts, sshd)) = Hosts::with_sshd(3) else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut child = start_recoverable_run(&hosts, &sshd, dir.path());
    wait_until_under_way(dir.path());
    hosts.kill(2, None);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while hosts.running(0, "wirespeed") + hosts.running(1, "wirespeed") > 0 {
        let log = std::fs::read_to_string(dir.path().join("mpirun.log")).unwrap_or_default();
        assert!(std::time::Instant::now() < deadline, "ranks still run: {log}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    let reader = boost_tsa_reader(dir.path());
    for n in 0..2 {
        let archive = dir.path().join(format!("run.{n}.tsa"));
        if archive.exists() {
            let text = read_with_boost(&reader, &archive);
            assert!(text.lines().last().unwrap().starts_with("ok "), "{text}");
        }
    }
}
