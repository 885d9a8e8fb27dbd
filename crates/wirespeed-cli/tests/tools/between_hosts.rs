//! `send` and `cp` between two network-namespace hosts (tests/hosts.py) whose link goes down
//! mid-transfer: one clear line within the peer timeout, nothing that looks complete, and
//! `cp --resume` finishes the copy once the link is back. A link back within the peer
//! timeout loses nothing.

use super::*;
use support::netns::Hosts;

/// What every process here is told: give up on a silent host after 6 s.
const PEER_TIMEOUT: &str = "6";
/// The most a failure may take to be reported: three peer timeouts.
const REPORTED_WITHIN: Duration = Duration::from_secs(18);

/// 60 MB that take three seconds at `--bwlimit 20`.
fn weights(dir: &std::path::Path) -> (std::path::PathBuf, Vec<u8>) {
    let data: Vec<u8> = (0..60_000_000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    let src = dir.join("weights.bin");
    fs::write(&src, &data).unwrap();
    (src, data)
}

/// Waits until `part` holds at least 8 MB: the transfer is well under way.
fn under_way(part: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while fs::metadata(part).map_or(0, |m| allocated_or_len(&m)) < 8_000_000 {
        assert!(Instant::now() < deadline, "{} did not grow", part.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn allocated_or_len(m: &fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    // A part file may be given its whole length first; its blocks tell what arrived.
    (m.blocks() * 512).min(m.len())
}

/// `wirespeed ARGS` on host `i`, with the test's key and peer timeout.
fn on(hosts: &Hosts, i: usize) -> Command {
    let mut c = hosts.command(i, BIN);
    c.env("WIRESPEED_KEY", "between hosts").env("WIRESPEED_PEER_TIMEOUT", PEER_TIMEOUT);
    c
}

/// The child's status, which must come within [`REPORTED_WITHIN`], and its one line.
fn failed_in_one_line(child: &mut std::process::Child, what: &str) -> String {
    let status = wait_for(child, REPORTED_WITHIN);
    let mut said = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut said).unwrap();
    assert!(!status.success(), "{what} succeeded with its link down: {said}");
    let lines: Vec<&str> = said.lines().filter(|l| !l.starts_with("wirespeed: listening")).collect();
    assert_eq!(lines.len(), 1, "{what}: {said}");
    said
}

#[test]
fn send_and_cp_fail_in_one_line_when_the_link_goes_down_and_resume_completes() {
    let Some((hosts, sshd)) = Hosts::with_sshd(2) else { return };
    let dir = tempfile::tempdir().unwrap();
    let (src, data) = weights(dir.path());
    for transport in ["tcp", "ucx"] {
        // send from A to a recv on B.
        let out = dir.path().join(format!("sent-{transport}.bin"));
        let mut recv = start_recv(
            on(&hosts, 1)
                .args(["recv", "--transport", transport, "--listen"])
                .arg(format!("{}:0", hosts.addrs[1]))
                .arg(&out),
        );
        let mut send = on(&hosts, 0)
            .args(["send", "--transport", transport, "--bwlimit", "20"])
            .arg(format!("{}:{}", hosts.addrs[1], recv.port))
            .arg(&src)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let part = dir.path().join(format!(".sent-{transport}.bin.wirespeed-part"));
        under_way(&part);
        hosts.link(1, "down");
        let said = failed_in_one_line(&mut send, "send");
        assert!(said.contains("connection lost"), "{transport}: {said}");
        let status = wait_for(&mut recv.child, REPORTED_WITHIN);
        let said = recv.stderr.join().unwrap();
        assert!(!status.success() && said.lines().count() == 2, "{transport}: {said}");
        assert!(!out.exists(), "nothing complete-looking");
        hosts.link(1, "up");

        // cp from A to B over ssh: it fails, then --resume finishes what arrived.
        let dst = dir.path().join(format!("copied-{transport}"));
        fs::create_dir(&dst).unwrap();
        let mut cp = on(&hosts, 0);
        cp.args(["cp", "-e", &sshd.ssh_command(), "--remote-bin", BIN, "--transport", transport]);
        let cp = cp.args(["--bwlimit", "20"]).arg(&src).arg(remote_on(hosts.namespace(1), &dst));
        let mut copying = cp.stderr(Stdio::piped()).spawn().unwrap();
        under_way(&dst.join(".weights.bin.wirespeed-part"));
        hosts.link(1, "down");
        failed_in_one_line(&mut copying, "cp");
        assert!(!dst.join("weights.bin").exists(), "nothing complete-looking");
        hosts.link(1, "up");
        let mut resume = on(&hosts, 0);
        resume.args(["cp", "-e", &sshd.ssh_command(), "--remote-bin", BIN, "--transport", transport, "--resume"]);
        let done = run(resume.arg(&src).arg(remote_on(hosts.namespace(1), &dst)));
        let summary = String::from_utf8_lossy(&done.stderr);
        assert!(done.status.success(), "{transport}: {summary}");
        assert!(summary.contains("already in place"), "{transport}: resume reused what arrived: {summary}");
        assert!(fs::read(dst.join("weights.bin")).unwrap() == data, "{transport}");
    }
}

#[test]
fn a_link_back_within_the_peer_timeout_loses_nothing() {
    let Some((hosts, sshd)) = Hosts::with_sshd(2) else { return };
    let dir = tempfile::tempdir().unwrap();
    let (src, data) = weights(dir.path());
    let out = dir.path().join("sent.bin");
    let recv = start_recv(
        on(&hosts, 1).args(["recv", "--transport", "tcp", "--listen"]).arg(format!("{}:0", hosts.addrs[1])).arg(&out),
    );
    let mut send = on(&hosts, 0)
        .args(["send", "--transport", "tcp", "--bwlimit", "20"])
        .arg(format!("{}:{}", hosts.addrs[1], recv.port))
        .arg(&src)
        .spawn()
        .unwrap();
    under_way(&dir.path().join(".sent.bin.wirespeed-part"));
    hosts.link(1, "down");
    std::thread::sleep(Duration::from_secs(3));
    hosts.link(1, "up");
    assert!(wait_for(&mut send, Duration::from_secs(60)).success());
    let mut recv = recv;
    assert!(wait_for(&mut recv.child, Duration::from_secs(60)).success(), "{}", recv.stderr.join().unwrap());
    assert!(fs::read(&out).unwrap() == data);

    let dst = dir.path().join("copied");
    fs::create_dir(&dst).unwrap();
    let mut cp = on(&hosts, 0);
    cp.args(["cp", "-e", &sshd.ssh_command(), "--remote-bin", BIN, "--transport", "tcp", "--bwlimit", "20"]);
    let mut copying = cp.arg(&src).arg(remote_on(hosts.namespace(1), &dst)).stderr(Stdio::piped()).spawn().unwrap();
    under_way(&dst.join(".weights.bin.wirespeed-part"));
    hosts.link(1, "down");
    std::thread::sleep(Duration::from_secs(3));
    hosts.link(1, "up");
    let status = wait_for(&mut copying, Duration::from_secs(60));
    let mut said = String::new();
    std::io::Read::read_to_string(copying.stderr.as_mut().unwrap(), &mut said).unwrap();
    assert!(status.success(), "{said}");
    assert!(fs::read(dst.join("weights.bin")).unwrap() == data);
}
