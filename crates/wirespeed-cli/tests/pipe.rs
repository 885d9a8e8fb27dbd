//! `wirespeed pipe` as users run it: stages are real processes on "hosts" reached through a
//! real sshd on 127.0.0.1 (the same host more than once, as ports are ephemeral), or on hosts
//! made of network namespaces.

mod support;

use std::fs;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

/// Runs `wirespeed pipe STAGES` with `input` on its standard input.
fn pipe(sshd: &Sshd, stages: &[&str], input: &[u8]) -> std::process::Output {
    pipe_with(sshd, &[], stages, input)
}

fn pipe_with(sshd: &Sshd, flags: &[&str], stages: &[&str], input: &[u8]) -> std::process::Output {
    let mut child = sshd
        .tool("pipe")
        .args(flags)
        .args(stages)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    out
}

fn text(len: usize) -> Vec<u8> {
    (0..len).map(|i| b"abcdefghijklmnopqrstuvwxyz \n"[i % 28]).collect()
}

#[test]
fn data_flows_through_commands_on_several_hosts() {
    let sshd = Sshd::start();
    let data = text(3_000_000);
    let out = pipe(&sshd, &["127.0.0.1:tr a-z A-Z", "127.0.0.1:cat", "127.0.0.1:tr -d E"], &data);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let want: Vec<u8> = data.to_ascii_uppercase().into_iter().filter(|b| *b != b'E').collect();
    assert!(out.stdout == want, "{} bytes, {} expected", out.stdout.len(), want.len());
}

/// Two hosts made of network namespaces, one visited twice: the data goes from host to host
/// over their network, not through the machine that started the pipeline.
#[test]
fn stages_on_two_hosts_pass_data_directly() {
    let Some((hosts, sshd)) = netns::Hosts::with_sshd(2) else { return };
    let (a, b) = (hosts.addrs[0].as_str(), hosts.addrs[1].as_str());
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("src.txt"), dir.path().join("dst.txt"));
    let data = text(20_000_000);
    fs::write(&src, &data).unwrap();
    let (b_before, here_before) = (hosts.received(1), hosts.received_here());

    let stages = [format!("{a}:< {}", src.display()), format!("{b}:tr a-z A-Z"), format!("{a}:> {}", dst.display())];
    let stages: Vec<&str> = stages.iter().map(String::as_str).collect();
    // Over TCP: both hosts share this kernel, so `auto` would rightly take shared memory.
    let out = pipe_with(&sshd, &["--transport", "tcp"], &stages, b"");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(fs::read(&dst).unwrap() == data.to_ascii_uppercase());
    let (to_b, to_here) = (hosts.received(1) - b_before, hosts.received_here() - here_before);
    assert!(to_b > data.len() as u64, "host b received {to_b} bytes over its network, less than the data");
    assert!(to_here < data.len() as u64 / 10, "{to_here} bytes came through the initiating host");
}

#[test]
fn file_operators_read_write_and_append() {
    let sshd = Sshd::start();
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("src.txt"), dir.path().join("dst.txt"));
    fs::write(&src, text(1_000_000)).unwrap();
    let read = format!("127.0.0.1:< {}", src.display());
    let write = format!("127.0.0.1:> {}", dst.display());
    let out = pipe(&sshd, &[&read, "127.0.0.1:tr a-z A-Z", &write], b"");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout.is_empty(), "`>` sends nothing on");
    let upper = text(1_000_000).to_ascii_uppercase();
    assert!(fs::read(&dst).unwrap() == upper);

    let append = format!("127.0.0.1:>> {}", dst.display());
    let out = pipe(&sshd, &[&append], b"more\n");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(fs::read(&dst).unwrap() == [upper, b"more\n".to_vec()].concat());

    // `~` in a file stage is the remote user's home, as the remote shell would read it (the
    // remote end is this host and user; the test's files lie in a directory of our home).
    let home = in_home();
    fs::write(home.dir.path().join("in.txt"), b"from home\n").unwrap();
    let rel = &home.name;
    let (read, write) = (format!("127.0.0.1:< ~/{rel}/in.txt"), format!("127.0.0.1:> ~/{rel}/copy.txt"));
    let out = pipe(&sshd, &[&read, &write], b"");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(fs::read(home.dir.path().join("copy.txt")).unwrap(), b"from home\n");
}

#[test]
fn a_stage_that_stops_reading_cuts_the_pipeline_short_without_failing_it() {
    let sshd = Sshd::start();
    let out = pipe(&sshd, &["127.0.0.1:yes", "127.0.0.1:head -c 100"], b"");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, b"y\n".repeat(50));
}

#[test]
fn a_failing_stage_tears_down_every_stage_and_gives_its_status() {
    let sshd = Sshd::start();
    let marker = format!("wirespeed-teardown-{}", std::process::id());
    let first = format!("127.0.0.1:yes {marker}");
    let last = format!("127.0.0.1:sleep 600; echo {marker}");
    let start = Instant::now();
    let out = pipe(&sshd, &[&first, "127.0.0.1:head -c 1000 >/dev/null; exit 7", &last], b"");
    assert_eq!(out.status.code(), Some(7), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(start.elapsed() < Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("stage 2"), "names the failing stage: {err}");
    // No stray process on any "host".
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = Command::new("pgrep").args(["-f", &marker]).output().unwrap();
        if !left.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "strays: {}", String::from_utf8_lossy(&left.stdout));
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn bad_stages_are_usage_errors() {
    let out = run(wirespeed().args(["pipe", "no-host-here"]));
    assert_eq!(out.status.code(), Some(2));
    let out = run(wirespeed().args(["pipe", "host:>"]));
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
}
