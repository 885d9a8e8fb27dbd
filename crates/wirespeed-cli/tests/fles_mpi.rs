//! `mpirun ... wirespeed fles run --inputs I`: Open MPI starts the ranks, the first I are
//! inputs and the others compute nodes.
#![cfg(feature = "mpi")]

use std::process::{Command, Output};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_wirespeed");

/// `mpirun` with what this host needs: more ranks than cores, and root in CI.
fn mpirun() -> Command {
    let mut c = Command::new("mpirun");
    c.args(["--oversubscribe", "--bind-to", "none"]);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        c.arg("--allow-run-as-root");
    }
    c.env("WIRESPEED_KEY", "the run's shared secret");
    c
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn six_ranks_build_every_timeslice() {
    for (transport, scheduler) in [("shm", "dfs"), ("tcp", "rr")] {
        let dir = tempfile::tempdir().unwrap();
        let report = dir.path().join("run.json");
        let out = mpirun()
            .args(["-np", "6", BIN, "fles", "run", "--inputs=3", "--timeslices=200", "--timeslice-size=20"])
            .args([&format!("--transport={transport}"), &format!("--scheduler={scheduler}"), "--interval-length=12"])
            .arg(format!("--report={}", report.display()))
            .output()
            .expect("mpirun (the bootstrap installs Open MPI)");
        assert!(out.status.success(), "{transport}: {}", text(&out));
        let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        assert_eq!(r["timeslices"], 200);
        assert_eq!(r["run"]["inputs"], 3);
        assert_eq!(r["computes"].as_array().unwrap().len(), 3);
        assert_eq!(r["inputs"].as_array().unwrap().len(), 3);
    }
}

#[test]
fn a_rank_with_another_key_stops_the_run_with_a_clear_error() {
    let args = [BIN, "fles", "run", "--inputs=2", "--timeslices=20", "--transport=tcp", "--timeout=10"];
    let out = mpirun()
        .args(["-np", "3"])
        .args(args)
        .args([":", "-np", "1", "-x", "WIRESPEED_KEY=not the same", BIN])
        .args(&args[1..])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("authentication"), "{}", text(&out));
}

#[test]
fn a_rank_that_never_starts_is_reported_within_the_timeout() {
    let started = Instant::now();
    let out = mpirun()
        .args(["-np", "3", BIN, "fles", "run", "--inputs=2", "--timeslices=20", "--timeout=5"])
        .args([":", "-np", "1", "sleep", "120"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("not every rank got there within 5s"), "{}", text(&out));
    assert!(started.elapsed() < Duration::from_secs(60), "{:?}", started.elapsed());
}

#[test]
fn sigusr1_to_mpirun_winds_the_run_down() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("run.json");
    let child = mpirun()
        .args(["-np", "4", BIN, "fles", "run", "--inputs=2", "--timeslice-size=10"])
        .arg(format!("--report={}", report.display()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGUSR1).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert!(r["timeslices"].as_u64().unwrap() > 0);
}

#[test]
fn under_enable_recovery_a_killed_compute_rank_leaves_its_work_to_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("run.json");
    let output = format!("--output=tsa:{}", dir.path().join("run.tsa").display());
    // A count no other test uses, to find this job's ranks.
    let args = ["fles", "run", "--inputs=3", "--timeslices=3001", "--timeslice-size=20", "--rate=0.01", "--timeout=6"];
    let child = mpirun()
        .args(["--enable-recovery", "-np", "6", BIN])
        .args(args)
        .arg(&output)
        .arg(format!("--report={}", report.display()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    // The newest rank is the last compute node.
    let killed =
        Command::new("pkill").args(["-KILL", "-n", "-f", &format!("^{BIN} fles run .*--timeslices=3001")]).status();
    assert!(killed.unwrap().success());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(r["lost_computes"], serde_json::json!([2]), "{}", text(&out));
    assert_eq!(r["incomplete"], 0);
    assert!(r["timeslices"].as_u64().unwrap() >= 2000);
    for survivor in ["run.0.tsa", "run.1.tsa"] {
        assert!(dir.path().join(survivor).exists(), "{survivor} written whole");
    }
}
