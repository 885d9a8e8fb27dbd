//! The `wirespeed` binary as a user runs it.

use std::process::Command;

fn wirespeed(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_wirespeed")).args(args).output().expect("run wirespeed")
}

#[test]
fn bench_raw_prints_json_for_every_transport() {
    for transport in ["tcp", "shm", "ucx", "ofi+shm", "ofi+tcp"] {
        let out = wirespeed(&[
            "bench",
            "raw",
            "--transport",
            transport,
            "--size",
            "65536",
            "--count",
            "300",
            "--streams",
            "3",
            "--json",
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
        assert_eq!(v["transport"], transport);
        assert_eq!(
            (v["messages"].as_u64(), v["streams"].as_u64(), v["message_bytes"].as_u64()),
            (Some(300), Some(3), Some(65536))
        );
        assert!(v["mb_per_s"].as_f64().unwrap() > 0.0);
        for k in ["mean", "p50", "p95", "p99", "max"] {
            assert!(v["latency_us"][k].is_number(), "latency_us.{k}");
        }
    }
}

#[test]
fn bench_raw_text_has_the_flight_benchmark_lines() {
    let out = wirespeed(&["bench", "raw", "--transport", "tcp", "--size", "4096", "--count", "1000"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for line in [
        "Speed: ",
        "Throughput: ",
        "Latency mean: ",
        "Latency quantile=0.5: ",
        "Latency quantile=0.95: ",
        "Latency quantile=0.99: ",
        "Latency max: ",
    ] {
        assert!(text.lines().any(|l| l.starts_with(line)), "missing {line:?} in\n{text}");
    }
}

#[test]
fn bad_arguments_give_one_line_and_a_failure_code() {
    let out = wirespeed(&["bench", "raw", "--transport", "tcp", "--size", "0"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("wirespeed: error: "));
}

#[test]
fn raw_server_without_a_key_fails_with_the_auth_code() {
    let out = Command::new(env!("CARGO_BIN_EXE_wirespeed"))
        .args(["bench", "raw-server", "--listen", "tcp://127.0.0.1:0", "--streams", "1", "--count", "1"])
        .env_remove("WIRESPEED_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
}
