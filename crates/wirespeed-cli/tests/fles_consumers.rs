//! `fles run --output shm:NAME`: consumers written from FLESnet's protocol, on libzmq and
//! Boost (tests/boost/shm_consumer.cpp), attach to a running builder, take every timeslice
//! once, and neither a consumer's death or stall nor the builder's leaves anyone hanging.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// tests/boost/shm_consumer.cpp, built once.
fn consumer_binary() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("wirespeed-consumer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let binary = dir.join("shm_consumer");
        let source = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/boost/shm_consumer.cpp");
        let built = Command::new("g++")
            .args(["-O1", "-o"])
            .arg(&binary)
            .arg(source)
            .args(["-lboost_serialization", "-lzmq", "-lrt"])
            .output()
            .expect("g++ (the bootstrap installs it with libzmq3-dev and Boost)");
        assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
        binary
    })
}

fn consumer(name: &str, args: &[&str]) -> Child {
    Command::new(consumer_binary()).arg(name).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

/// A `--local` run in a process group of its own, so that a test can kill all of it.
fn builder(layout: &str, output: &str, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_wirespeed"))
        .args(["fles", "run", &format!("--local={layout}"), "--timeslice-size=10", "--timeout=20"])
        .arg(format!("--output={output}"))
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap()
}

fn unique(name: &str) -> String {
    format!("wst-{name}-{}", std::process::id())
}

/// Waits for a child, at most `limit`: a hang fails the test rather than holding CI.
fn finish(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("still running after {limit:?}: {:?}", child.wait_with_output().map(|o| o.stderr));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The timeslice indices a consumer printed.
fn indices(o: &Output) -> Vec<u64> {
    stdout(o).lines().filter_map(|l| l.strip_prefix("timeslice ")?.split(' ').next()?.parse().ok()).collect()
}

#[test]
fn every_timeslice_reaches_a_consumer_once_with_every_crc_right() {
    let name = unique("all");
    let run = builder("2:2", &format!("shm:{name}?consumers=1"), &["--timeslices=200"]);
    let consumers: Vec<Child> = (0..2).map(|c| consumer(&format!("{name}.{c}"), &[])).collect();
    let run = finish(run, Duration::from_secs(60));
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let mut seen = Vec::new();
    for c in consumers {
        let out = finish(c, Duration::from_secs(30));
        assert!(out.status.success(), "{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
        // 100 timeslices of 2 components of 11 microslices each per compute node.
        assert_eq!(stdout(&out).lines().last(), Some("ok 100 200 2200"));
        seen.extend(indices(&out));
    }
    seen.sort();
    assert_eq!(seen, (0..200).collect::<Vec<u64>>());
    for c in 0..2 {
        let segment = format!("/dev/shm/{name}.{c}");
        assert!(!std::path::Path::new(&segment).exists(), "a finished run left {segment}");
    }
}

#[test]
fn a_consumer_that_dies_or_stalls_never_holds_the_builder() {
    let name = unique("abuse");
    // Three consumers share the node's timeslices by stride: one dies holding its 5th, one
    // stalls holding its 3rd (and loses it after the 3 s hold: long enough that the steady one,
    // on a machine this busy, is never taken for stalled), one takes all of its own.
    let run = builder("2:1", &format!("shm:{name}?consumers=3&hold=3"), &["--timeslices=300", "--buffer-size=65536"]);
    let dies = consumer(&name, &["--stride", "3", "--offset", "0", "--die-after", "5"]);
    let stalls = consumer(&name, &["--stride", "3", "--offset", "1", "--stall-after", "3"]);
    let steady = consumer(&name, &["--stride", "3", "--offset", "2"]);
    let run = finish(run, Duration::from_secs(60));
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert!(stdout(&run).contains("300 timeslices in"), "{}", stdout(&run));
    let steady = finish(steady, Duration::from_secs(30));
    let said = |o: &Output| format!("{}{}", stdout(o), String::from_utf8_lossy(&o.stderr));
    assert!(steady.status.success(), "{}\nthe run said:\n{}", said(&steady), said(&run));
    assert_eq!(indices(&steady), (0..100).map(|k| 3 * k + 2).collect::<Vec<u64>>());
    assert_eq!(finish(dies, Duration::from_secs(5)).status.code(), Some(3));
    let mut stalls = stalls;
    let _ = stalls.kill();
    assert_eq!(indices(&stalls.wait_with_output().unwrap()), [1, 4, 7]);
    assert!(!std::path::Path::new(&format!("/dev/shm/{name}")).exists(), "the run left its segment");
}

#[test]
fn the_builders_death_ends_its_consumers_stream() {
    let name = unique("death");
    // A run that would last a minute, killed once the consumer has taken some timeslices.
    let run = builder("1:1", &format!("shm:{name}?consumers=1"), &["--timeslices=100000", "--rate=0.001"]);
    let c = consumer(&name, &[]);
    std::thread::sleep(Duration::from_secs(2));
    let group = nix::unistd::Pid::from_raw(run.id() as i32);
    nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL).unwrap();
    // A killed builder cannot remove its segment (nor can FLESnet's): the operator does.
    let _ = std::fs::remove_file(format!("/dev/shm/{name}"));
    let out = finish(c, Duration::from_secs(30));
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(!indices(&out).is_empty(), "it took some before");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no word from the node"));
    let _ = finish(run, Duration::from_secs(10));
}

#[test]
fn our_consumer_and_flesnets_share_a_node_by_stride() {
    let name = unique("stride");
    let run = builder("2:1", &format!("shm:{name}?consumers=2"), &["--timeslices=100"]);
    let ours = Command::new(env!("CARGO_BIN_EXE_wirespeed"))
        .args(["fles", "consume", &name, "--stride=2", "--offset=0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let theirs = consumer(&name, &["--stride", "2", "--offset", "1"]);
    assert!(finish(run, Duration::from_secs(60)).status.success());
    let ours = finish(ours, Duration::from_secs(30));
    assert!(ours.status.success(), "{}", String::from_utf8_lossy(&ours.stderr));
    assert!(stdout(&ours).starts_with("50 timeslices, 1100 microslices"), "{}", stdout(&ours));
    let theirs = finish(theirs, Duration::from_secs(30));
    assert_eq!(indices(&theirs), (0..50).map(|k| 2 * k + 1).collect::<Vec<u64>>());

    let nobody = Command::new(env!("CARGO_BIN_EXE_wirespeed"))
        .args(["fles", "consume", &unique("none"), "--wait=0.5"])
        .output()
        .unwrap();
    assert!(!nobody.status.success());
    let err = String::from_utf8_lossy(&nobody.stderr);
    assert!(err.contains("attaching to") && err.contains("Connection refused"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// Hundreds of sockets that connect and say nothing, and one that sends an oversized frame,
/// keep no consumer out: the node drops the garbage and, when full, the oldest silent socket.
#[test]
fn silent_and_garbage_peers_keep_no_consumer_out() {
    use std::io::Write;
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixStream};
    let name = unique("abuse-peers");
    let run = builder("1:1", &format!("shm:{name}?consumers=1"), &["--timeslices=200"]);
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let first = loop {
        match UnixStream::connect_addr(&addr) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("the node never listened: {e}"),
        }
    };
    let mut silent: Vec<UnixStream> = (0..300).filter_map(|_| UnixStream::connect_addr(&addr).ok()).collect();
    silent.push(first);
    let mut garbage = UnixStream::connect_addr(&addr).unwrap();
    let mut greeting = vec![0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0x7F, 3, 0];
    greeting.extend_from_slice(b"NULL");
    greeting.resize(64, 0);
    garbage.write_all(&greeting).unwrap();
    let _ = garbage.write_all(&[0x06, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]);
    std::thread::sleep(Duration::from_millis(500)); // all of them taken before the consumer comes
    let ours = Command::new(env!("CARGO_BIN_EXE_wirespeed")).args(["fles", "consume", &name]).output().unwrap();
    assert!(ours.status.success(), "{}", String::from_utf8_lossy(&ours.stderr));
    assert!(stdout(&ours).starts_with("200 timeslices, "), "{}", stdout(&ours));
    assert!(finish(run, Duration::from_secs(60)).status.success());
    drop(silent);
}
