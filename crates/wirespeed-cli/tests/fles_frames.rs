//! `fles run --gpu`: timeslices built contiguously in frame memory as their components
//! arrive, each microslice checked there. Host memory takes the GPU's path here (`--gpu
//! host`); the GPU itself is checked by bench/gpu_device.sh on a machine that has one.

use std::process::{Command, Output};

fn fles_run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wirespeed")).args(["fles", "run"]).args(args).output().unwrap()
}

const SMALL: [&str; 5] = [
    "--timeslice-size=20",
    "--microslice-size=500",
    "--microslice-spread=100",
    "--buffer-size=1048576",
    "--timeout=20",
];

#[test]
fn every_timeslice_is_built_in_a_frame_and_every_microslice_checked_once() {
    for (transport, scheduler) in [("shm", "dfs"), ("tcp", "rr")] {
        let dir = tempfile::tempdir().unwrap();
        let report = dir.path().join("run.json");
        let mut args = vec![
            "--local=3:2".to_string(),
            format!("--transport={transport}"),
            format!("--scheduler={scheduler}"),
            "--timeslices=300".into(),
            "--gpu=host".into(),
            "--frames=3".into(),
            format!("--report={}", report.display()),
        ];
        args.extend(SMALL.map(String::from));
        let out = fles_run(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
        assert!(text.contains("frames on host (host memory)"), "{text}");
        let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        let computes = r["computes"].as_array().unwrap();
        let frames = |key: &str| computes.iter().map(|c| c["frames"][key].as_u64().unwrap()).sum::<u64>();
        assert_eq!(frames("built"), 300);
        // 3 inputs, 21 microslices a component (20 core, 1 overlap).
        assert_eq!(frames("microslices_checked"), 300 * 3 * 21);
        for c in computes {
            assert!(c["frames"]["ready_us"]["p99"].as_f64().unwrap() > 0.0);
        }
    }
}

#[test]
fn a_wrong_byte_is_found_in_frame_memory_as_on_the_cpu() {
    for frames in [&["--gpu=host"][..], &[]] {
        let mut args = vec!["--local=2:1", "--timeslices=200", "--corrupt=57"];
        args.extend(frames);
        args.extend(SMALL);
        let out = fles_run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(err.contains("CRC-32C"), "{err}");
        if !frames.is_empty() {
            assert!(err.contains("timeslice 57: 1 microslices fail their CRC-32C in frame memory"), "{err}");
        }
    }
}

#[test]
fn without_a_gpu_the_gpu_path_says_so_in_one_line() {
    if std::path::Path::new("/dev/nvidia0").exists() {
        return; // this host has one: bench/gpu_device.sh checks it
    }
    let out = fles_run(&["--local=1:1", "--timeslices=10", "--gpu=0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.lines().next().is_some_and(|l| l.contains("no GPU: the CUDA driver")), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_wirespeed")).args(["bench", "gpu"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no GPU"));
}

#[test]
fn frames_and_an_output_file_do_not_mix() {
    let dir = tempfile::tempdir().unwrap();
    let out = fles_run(&[
        "--local=1:1",
        "--timeslices=10",
        "--gpu=host",
        &format!("--output=tsa:{}", dir.path().join("x.tsa").display()),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("leave out --output"));
}
