//! `send`, `recv` and `cp` as users run them: real processes, real sockets and shared
//! memory, and a real sshd on 127.0.0.1 for the remote ends.

mod support;

use std::fs;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

fn with_key<'a>(c: &'a mut Command, key: &str) -> &'a mut Command {
    c.env("WIRESPEED_KEY", key)
}

/// `recv` on a free port of 127.0.0.1 over `transport`, with `key`.
fn recv_cmd(key: &str, transport: &str) -> Command {
    let mut c = wirespeed();
    with_key(&mut c, key).args(["recv", "--listen", "127.0.0.1:0", "--transport", transport]);
    c
}

/// `recv` writing to its standard output, and a thread collecting what it writes.
fn recv_to_stdout(key: &str, transport: &str) -> (Receiver, std::thread::JoinHandle<Vec<u8>>) {
    let mut recv = start_recv(recv_cmd(key, transport).stdout(Stdio::piped()));
    let mut stdout = recv.child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut v).unwrap();
        v
    });
    (recv, reader)
}

#[test]
fn send_and_recv_move_a_file_and_a_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..5_000_000u32).map(|i| (i % 251) as u8).collect();
    fs::write(dir.path().join("in.bin"), &data).unwrap();
    for transport in ["auto", "tcp", "ucx", "ofi+tcp"] {
        // A file into a file.
        let out = dir.path().join(format!("out-{transport}.bin"));
        let mut recv = start_recv(recv_cmd("k1", transport).arg(&out));
        let sent = run(with_key(&mut wirespeed(), "k1")
            .args(["send", &format!("127.0.0.1:{}", recv.port), "-v", "--transport", transport])
            .arg(dir.path().join("in.bin")));
        assert!(sent.status.success(), "{}", String::from_utf8_lossy(&sent.stderr));
        assert!(String::from_utf8_lossy(&sent.stderr).contains("Bandwidth "), "-v prints the bandwidth");
        assert!(wait_for(&mut recv.child, Duration::from_secs(60)).success(), "{}", recv.stderr.join().unwrap());
        assert_eq!(fs::read(&out).unwrap(), data);

        // Several files into a directory, each under its own name.
        let into = dir.path().join(format!("into-{transport}"));
        let mut recv = start_recv(recv_cmd("k1", transport).arg(&into));
        let sent = run(with_key(&mut wirespeed(), "k1")
            .args(["send", &format!("127.0.0.1:{}", recv.port), "--transport", transport])
            .arg(dir.path().join("in.bin"))
            .arg(&out));
        assert!(sent.status.success(), "{}", String::from_utf8_lossy(&sent.stderr));
        assert!(wait_for(&mut recv.child, Duration::from_secs(60)).success(), "{}", recv.stderr.join().unwrap());
        assert_eq!(fs::read(into.join("in.bin")).unwrap(), data);
        assert_eq!(fs::read(into.join(format!("out-{transport}.bin"))).unwrap(), data);

        // Standard input to standard output: length unknown until the end.
        let (mut recv, reader) = recv_to_stdout("k2", transport);
        let mut send = with_key(&mut wirespeed(), "k2")
            .args(["send", &format!("127.0.0.1:{}", recv.port), "--transport", transport])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = send.stdin.take().unwrap();
        stdin.write_all(&data).unwrap();
        stdin.write_all(&data[..12345]).unwrap();
        drop(stdin);
        assert!(wait_for(&mut send, Duration::from_secs(60)).success());
        assert!(wait_for(&mut recv.child, Duration::from_secs(60)).success());
        let got = reader.join().unwrap();
        assert_eq!(got.len(), data.len() + 12345);
        assert!(got[..data.len()] == data[..] && got[data.len()..] == data[..12345]);
    }
}

#[test]
fn a_file_to_standard_output_arrives_in_order_over_four_streams() {
    // Ten chunks of 4 MiB with a hole across two of them. Over tcp and ucx the chunks travel
    // over four streams (over shm, on one), and the sink writes them (the hole as zeros) in
    // order.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sparse.bin");
    let mut expected: Vec<u8> = (0..38_000_000u32).map(|i| (i.wrapping_mul(2654435761) >> 24) as u8).collect();
    expected[8 << 20..16 << 20].fill(0);
    let f = fs::File::create(&path).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(&expected[..8 << 20], 0).unwrap();
    f.write_all_at(&expected[16 << 20..], 16 << 20).unwrap();
    drop(f);
    for transport in ["auto", "tcp", "ucx"] {
        let (mut recv, reader) = recv_to_stdout("k5", transport);
        let sent = run(with_key(&mut wirespeed(), "k5")
            .args(["send", &format!("127.0.0.1:{}", recv.port), "--streams", "4", "--transport", transport])
            .arg(&path));
        assert!(sent.status.success(), "{}", String::from_utf8_lossy(&sent.stderr));
        assert!(wait_for(&mut recv.child, Duration::from_secs(60)).success(), "{}", recv.stderr.join().unwrap());
        assert!(reader.join().unwrap() == expected, "{transport}: the bytes differ");
    }
}

/// A sender with the wrong key, or asking for another transport than the receiver's, fails
/// with its own exit code and one line; the receiver waits on for the right sender.
#[test]
fn refused_senders_fail_with_their_exit_code_and_the_receiver_waits_on() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("f"), b"secret").unwrap();
    let mut recv = start_recv(
        with_key(&mut wirespeed(), "right")
            .args(["recv", "--listen", "127.0.0.1:0", "--wait", "20"])
            .arg(dir.path().join("out")),
    );
    let to = format!("127.0.0.1:{}", recv.port);
    for (key, transport, code, says) in [("wrong", "auto", 3, "authentication"), ("right", "ucx", 4, "same transport")]
    {
        let sent = run(with_key(&mut wirespeed(), key)
            .args(["send", "--transport", transport, &to])
            .arg(dir.path().join("f")));
        let err = String::from_utf8_lossy(&sent.stderr);
        assert_eq!(sent.status.code(), Some(code), "{transport}: {err}");
        assert!(err.contains(says) && err.lines().count() == 1, "one clear line: {err}");
        assert!(!dir.path().join("out").exists());
    }
    let sent = run(with_key(&mut wirespeed(), "right").args(["send", &to]).arg(dir.path().join("f")));
    assert!(sent.status.success(), "{}", String::from_utf8_lossy(&sent.stderr));
    assert!(wait_for(&mut recv.child, Duration::from_secs(20)).success());
    assert_eq!(fs::read(dir.path().join("out")).unwrap(), b"secret");
}

/// A file that shrinks while it is sent fails the transfer, and both ends say why: not with
/// the stream resets and lost connections that follow from it.
#[test]
fn a_source_that_changes_mid_transfer_is_the_error_both_ends_report() {
    let dir = tempfile::tempdir().unwrap();
    let key = "changing source";
    for transport in ["auto", "tcp"] {
        let src = dir.path().join("growing.log");
        fs::write(&src, vec![7u8; 30_000_000]).unwrap();
        let out = dir.path().join(format!("out-{transport}"));
        fs::create_dir(&out).unwrap();
        let mut recv = start_recv(with_key(&mut wirespeed(), key).args(["recv", "--listen", "127.0.0.1:0"]).arg(&out));
        let shrink = {
            let src = src.clone();
            // 10 MB/s: the file is cut while most of it is still to be sent.
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                fs::File::options().write(true).open(&src).unwrap().set_len(1_000_000).unwrap();
            })
        };
        let sent = run(with_key(&mut wirespeed(), key)
            .args(["send", "--bwlimit", "10", "--transport", transport, &format!("127.0.0.1:{}", recv.port)])
            .arg(&src));
        shrink.join().unwrap();
        let said = String::from_utf8_lossy(&sent.stderr);
        assert_eq!(sent.status.code(), Some(5), "{transport}: {said}");
        assert!(said.contains("changed while it was read") && said.lines().count() == 1, "{transport}: {said}");
        let status = wait_for(&mut recv.child, Duration::from_secs(20));
        let heard = recv.stderr.join().unwrap();
        assert_eq!(status.code(), Some(5), "{transport}: {heard}");
        assert!(heard.contains("changed while it was read"), "{transport}: {heard}");
        assert!(!out.join("growing.log").exists(), "{transport}: nothing in place");
    }
}

/// Relays one TCP connection to `to`, keeping a copy of what the client sent.
fn tap(to: u16) -> (u16, std::thread::JoinHandle<Vec<u8>>) {
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = std::thread::spawn(move || {
        let (mut client, _) = l.accept().unwrap();
        let mut server = TcpStream::connect(("127.0.0.1", to)).unwrap();
        let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
        let back = std::thread::spawn(move || {
            let _ = std::io::copy(&mut s2, &mut c2);
            let _ = c2.shutdown(std::net::Shutdown::Write);
        });
        let mut seen = Vec::new();
        let mut buf = [0u8; 65536];
        while let Ok(n @ 1..) = client.read(&mut buf) {
            seen.extend_from_slice(&buf[..n]);
            if server.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = server.shutdown(std::net::Shutdown::Write);
        back.join().unwrap();
        seen
    });
    (port, seen)
}

#[test]
fn encrypted_transfers_hide_names_and_data_and_plain_senders_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir(&src).unwrap();
    let marker = b"SECRET-MODEL-WEIGHTS-";
    fs::write(src.join("small-secret-name.txt"), marker.repeat(100)).unwrap();
    fs::write(src.join("large.bin"), marker.repeat(500_000)).unwrap();
    for compress in ["none", "zstd"] {
        let out = dir.path().join(format!("out-{compress}"));
        let mut recv = start_recv(
            with_key(&mut wirespeed(), "k3")
                .args(["recv", "--listen", "127.0.0.1:0", "--transport", "tcp", "--encrypt"])
                .arg(&out),
        );
        let (port, seen) = tap(recv.port);
        let sent = run(with_key(&mut wirespeed(), "k3")
            .args(["send", "-r", &format!("127.0.0.1:{port}"), "--transport", "tcp", "--encrypt"])
            .args(["--compress", compress])
            .arg(&src));
        assert!(sent.status.success(), "{}", String::from_utf8_lossy(&sent.stderr));
        assert!(wait_for(&mut recv.child, Duration::from_secs(60)).success(), "{}", recv.stderr.join().unwrap());
        assert_eq!(snapshot(&src, false), snapshot(&out, false));
        let seen = seen.join().unwrap();
        // The tap saw it all, and compression shrank the repetitive data on the wire.
        match compress {
            "none" => assert!(seen.len() > 10_500_000, "{} bytes on the wire", seen.len()),
            _ => assert!(seen.len() < 1_000_000, "{} bytes on the wire", seen.len()),
        }
        for secret in [&marker[..], b"small-secret-name", b"large.bin"] {
            assert!(
                !seen.windows(secret.len()).any(|w| w == secret),
                "{:?} went in clear",
                String::from_utf8_lossy(secret)
            );
        }
    }

    // A receiver that asks for encryption refuses a sender that does not encrypt.
    let out = dir.path().join("refused");
    let mut recv =
        start_recv(with_key(&mut wirespeed(), "k4").args(["recv", "--listen", "127.0.0.1:0", "--encrypt"]).arg(&out));
    let sent =
        run(with_key(&mut wirespeed(), "k4").args(["send", "-r", &format!("127.0.0.1:{}", recv.port)]).arg(&src));
    assert_eq!(sent.status.code(), Some(3), "{}", String::from_utf8_lossy(&sent.stderr));
    assert!(String::from_utf8_lossy(&sent.stderr).contains("--encrypt"));
    assert_eq!(wait_for(&mut recv.child, Duration::from_secs(60)).code(), Some(3));
    assert!(!out.exists(), "nothing written");
}

#[test]
fn recv_without_a_key_generates_and_prints_one() {
    let mut c = wirespeed();
    c.env_remove("WIRESPEED_KEY").args(["recv", "--listen", "127.0.0.1:0", "--wait", "1"]);
    let out = run(&mut c);
    let err = String::from_utf8_lossy(&out.stderr);
    let key_line = err.lines().find(|l| l.contains("key ")).expect("a key line");
    assert!(key_line.split_whitespace().any(|w| w.len() == 64 && w.bytes().all(|b| b.is_ascii_hexdigit())));
    assert_eq!(out.status.code(), Some(4), "no sender came: a connection failure");
}

#[test]
fn cp_local_to_remote_keeps_a_tricky_tree() {
    let sshd = Sshd::start();
    let dir = tempfile::tempdir().unwrap();
    let tree = tricky_tree(dir.path());
    let dst = dir.path().join("dst");
    fs::create_dir(&dst).unwrap();
    for transport in ["auto", "tcp"] {
        let into = dst.join(transport);
        let out = run(sshd.cp().args(["-r", "-p", "--transport", transport]).arg(&tree).arg(remote(&into)));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let summary = String::from_utf8_lossy(&out.stderr);
        assert!(summary.contains(" files, ") && summary.contains(" GB/s"), "{summary}");
        // `into` did not exist, so the tree became it (as with cp -r).
        assert_eq!(snapshot(&tree, true), snapshot(&into, true));
        assert!(allocated(&into.join("sparse.img")) < 1 << 20, "holes stay holes");
        let leftovers: Vec<_> = fs::read_dir(&into)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".wirespeed-part"))
            .collect();
        assert!(leftovers.is_empty());
    }
}

#[test]
fn cp_remote_to_local_and_remote_to_remote() {
    let sshd = Sshd::start();
    let dir = tempfile::tempdir().unwrap();
    let tree = tricky_tree(dir.path());
    let a = dir.path().join("a");
    let out = run(sshd.cp().arg("-r").arg(remote(&tree)).arg(&a));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(snapshot(&tree, false), snapshot(&a, false));

    // Into an existing directory: the tree lands inside it under its own name.
    let b = dir.path().join("b");
    fs::create_dir(&b).unwrap();
    // Both agents get the transfer's options.
    let out = run(sshd.cp().args(["-r", "--encrypt", "--compress", "zstd"]).arg(remote(&a)).arg(remote(&b)));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(snapshot(&tree, false), snapshot(&b.join("a"), false));

    // A single file, remote to local, into a directory.
    let out = run(sshd.cp().arg(remote(&tree.join("sub dir/big.bin"))).arg(&b));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(fs::read(b.join("big.bin")).unwrap(), fs::read(tree.join("sub dir/big.bin")).unwrap());
}

/// Several sources, as with `cp a b dir/` and `rsync a b dir/`: each lands under its own name
/// in the destination directory (made if missing), in one transfer per copy, local or remote.
/// Sources that would take the same name, or live on different hosts, are refused up front.
#[test]
fn cp_copies_several_sources_into_one_directory() {
    let sshd = Sshd::start();
    let dir = tempfile::tempdir().unwrap();
    let tree = tricky_tree(dir.path());
    let single = dir.path().join("single.txt");
    fs::write(&single, b"one file").unwrap();
    let expect = |into: &std::path::Path| {
        assert_eq!(snapshot(&tree, true), snapshot(&into.join("tree"), true));
        assert_eq!(fs::read(into.join("single.txt")).unwrap(), b"one file");
    };

    // Into an existing directory, whose other contents stay, and into a new one.
    let existing = dir.path().join("existing");
    fs::create_dir(&existing).unwrap();
    fs::write(existing.join("other"), b"kept").unwrap();
    let fresh = dir.path().join("fresh");
    for into in [&existing, &fresh] {
        let out = run(wirespeed().args(["cp", "-r", "-p"]).arg(&tree).arg(&single).arg(into));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        expect(into);
    }
    assert_eq!(fs::read(existing.join("other")).unwrap(), b"kept");

    // Local to remote, remote to local, and remote to remote.
    let (up, down, across) = (dir.path().join("up"), dir.path().join("down"), dir.path().join("across"));
    let out = run(sshd.cp().args(["-r", "-p"]).arg(&tree).arg(&single).arg(remote(&up)));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    expect(&up);
    let out = run(sshd.cp().args(["-r", "-p"]).arg(remote(&tree)).arg(remote(&single)).arg(&down));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    expect(&down);
    let out = run(sshd.cp().args(["-r", "-p"]).arg(remote(&tree)).arg(remote(&single)).arg(remote(&across)));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    expect(&across);

    // Two sources named alike, here or there, and sources on two hosts: usage errors, in one
    // line, before anything is written.
    let twin = dir.path().join("twin");
    fs::create_dir(&twin).unwrap();
    fs::write(twin.join("single.txt"), b"another").unwrap();
    let refused = dir.path().join("refused");
    for out in [
        run(wirespeed().arg("cp").arg(&single).arg(twin.join("single.txt")).arg(&refused)),
        run(sshd.cp().arg(remote(&single)).arg(remote(&twin.join("single.txt"))).arg(&refused)),
        run(sshd.cp().arg(&single).arg(remote(&tree)).arg(&refused)),
    ] {
        assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
        assert!(!refused.exists());
    }

    // A file is no directory to copy several sources into; it stays as it was.
    let file = dir.path().join("a-file");
    fs::write(&file, b"untouched").unwrap();
    let out = run(wirespeed().args(["cp", "-r"]).arg(&tree).arg(&single).arg(&file));
    assert!(!out.status.success());
    assert_eq!(fs::read(&file).unwrap(), b"untouched");
}

/// Two hosts made of network namespaces: a remote to remote copy goes straight from one to the
/// other over their network, not through the machine that started it.
#[test]
fn cp_remote_to_remote_goes_directly_between_two_hosts() {
    // Declared in this order, sshd goes first: no process outlives its namespace.
    let Some((hosts, sshd)) = netns::Hosts::with_sshd(2) else { return };
    let (a, b) = (hosts.addrs[0].as_str(), hosts.addrs[1].as_str());
    let dir = tempfile::tempdir().unwrap();
    let tree = tricky_tree(dir.path());
    let dst = dir.path().join("on-b");
    fs::create_dir(&dst).unwrap();
    let big = fs::metadata(tree.join("sub dir/big.bin")).unwrap().len();
    let (b_before, here_before) = (hosts.received(1), hosts.received_here());

    // Over TCP: both ends share this kernel, so `auto` would rightly take shared memory.
    let out = run(sshd.cp().args(["-r", "--transport", "tcp"]).arg(remote_on(a, &tree)).arg(remote_on(b, &dst)));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(snapshot(&tree, false), snapshot(&dst.join("tree"), false));
    let (to_b, to_here) = (hosts.received(1) - b_before, hosts.received_here() - here_before);
    assert!(to_b > big, "host b received {to_b} bytes over its network, less than the data");
    assert!(to_here < big / 10, "{to_here} bytes came through the initiating host");
}

#[test]
fn a_receiver_killed_mid_copy_leaves_no_complete_file_and_resume_finishes_it() {
    let sshd = Sshd::start();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("weights.bin");
    let data: Vec<u8> = (0..48_000_000u32).map(|i| (i.wrapping_mul(2246822519) >> 11) as u8).collect();
    fs::write(&src, &data).unwrap();
    let dst = dir.path().join("killed-receiver-dst");
    fs::create_dir(&dst).unwrap();
    let part = dst.join(".weights.bin.wirespeed-part");

    // 16 MB/s: three seconds, so the receiving agent is surely killed part way.
    let mut cp = sshd
        .cp()
        .args(["--bwlimit", "16", "--streams", "2"])
        .arg(&src)
        .arg(remote(&dst))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !part.exists() {
        assert!(Instant::now() < deadline, "no part file appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1200));
    let killed = Command::new("pkill").args(["-KILL", "-f", "agent sink .*killed-receiver-dst"]).status().unwrap();
    assert!(killed.success(), "the receiving agent was running");
    let status = wait_for(&mut cp, Duration::from_secs(60));
    assert!(!status.success());
    assert!(!dst.join("weights.bin").exists(), "nothing complete-looking");
    assert!(part.exists());

    let out = run(sshd.cp().arg("--resume").arg(&src).arg(remote(&dst)));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(fs::read(dst.join("weights.bin")).unwrap() == data);
    assert!(!part.exists());
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(summary.contains("already in place"), "resume reused what verified: {summary}");
}

#[test]
fn cp_local_copies_trees_and_single_small_files() {
    let dir = tempfile::tempdir().unwrap();
    let tree = tricky_tree(dir.path());
    let copy = dir.path().join("copy");
    let out = run(wirespeed().args(["cp", "-r", "-p"]).arg(&tree).arg(&copy));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(snapshot(&tree, true), snapshot(&copy, true));

    // A small file travels inline: to a new name, into a directory, and over an older copy.
    let small = dir.path().join("small.txt");
    fs::write(&small, b"a few bytes").unwrap();
    let renamed = dir.path().join("renamed.txt");
    let into = dir.path().join("into");
    fs::create_dir(&into).unwrap();
    fs::write(into.join("small.txt"), b"an older, longer version").unwrap();
    for (to, lands) in [(&renamed, renamed.clone()), (&into, into.join("small.txt"))] {
        let out = run(wirespeed().arg("cp").arg(&small).arg(to));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(fs::read(&lands).unwrap(), b"a few bytes");
    }
    let names: Vec<_> = fs::read_dir(&into).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["small.txt"], "nothing else is left beside it");

    // A bare name is in the working directory (`cp small.txt copy.txt`), for `recv` too.
    let out = run(wirespeed().current_dir(dir.path()).args(["cp", "small.txt", "bare.txt"]));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(fs::read(dir.path().join("bare.txt")).unwrap(), b"a few bytes");
    let mut recv = start_recv(recv_cmd("k", "auto").current_dir(dir.path()).arg("received.txt"));
    let sent = run(with_key(&mut wirespeed(), "k").args(["send", &format!("127.0.0.1:{}", recv.port)]).arg(&small));
    assert!(sent.status.success(), "{}", String::from_utf8_lossy(&sent.stderr));
    assert!(wait_for(&mut recv.child, Duration::from_secs(60)).success(), "{}", recv.stderr.join().unwrap());
    assert_eq!(fs::read(dir.path().join("received.txt")).unwrap(), b"a few bytes");
}

/// Remote operands as scp and rsync users write them: relative to the remote home, `~` and
/// `~user`, patterns the remote end expands, and IPv6 addresses in brackets.
#[test]
fn cp_reads_remote_paths_as_scp_does() {
    let sshd = Sshd::start();
    let home = in_home();
    let (rel, in_home) = (&home.name, home.dir.path());
    for name in ["a.csv", "b.csv", "c.txt"] {
        fs::write(in_home.join(name), name).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let got = |name: &str| fs::read(dir.path().join(name)).unwrap();

    let forms = [format!("{rel}/c.txt"), format!("~/{rel}/c.txt"), format!("~{}/{rel}/c.txt", home.user)];
    for (i, form) in forms.iter().enumerate() {
        let out = run(sshd.cp().arg(format!("127.0.0.1:{form}")).arg(dir.path().join(format!("{i}.txt"))));
        assert!(out.status.success(), "{form}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(got(&format!("{i}.txt")), b"c.txt");
    }
    let out = run(sshd.cp().arg(dir.path().join("0.txt")).arg(format!("127.0.0.1:~/{rel}/back.txt")));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(fs::read(in_home.join("back.txt")).unwrap(), b"c.txt");

    // A pattern is expanded where the files are, into several sources.
    let out = run(sshd.cp().arg(format!("127.0.0.1:~/{rel}/*.csv")).arg(dir.path().join("csv")));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut names: Vec<_> = fs::read_dir(dir.path().join("csv")).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    assert_eq!(names, ["a.csv", "b.csv"]);

    // One that matches nothing, and an unknown user, fail in one line with their exit codes.
    for (from, code, says) in [
        (format!("127.0.0.1:~/{rel}/*.parquet"), 5, "nothing matches"),
        ("127.0.0.1:~no-such-user/x".to_string(), 2, "no such user"),
    ] {
        let out = run(sshd.cp().arg(&from).arg(dir.path().join("none")));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{from}: {err}");
        assert!(err.contains(says) && err.lines().count() == 1, "{from}: {err}");
    }

    // `[::1]:path`, where this host has IPv6 on loopback.
    if std::net::TcpListener::bind("[::1]:0").is_ok() {
        let v6 = Sshd::start_on(&[(None, "::1")]);
        let out = run(v6.cp().arg(format!("[::1]:{rel}/a.csv")).arg(dir.path().join("v6.csv")));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(got("v6.csv"), b"a.csv");
    }
}

#[test]
fn a_tree_copied_to_a_new_name_appears_only_when_complete() {
    use std::os::fd::AsRawFd;
    let dir = tempfile::tempdir().unwrap();
    let tree = tricky_tree(dir.path());
    let copy = dir.path().join("copy");
    let part = dir.path().join(".copy.wirespeed-part");
    // An interrupted copy's leftovers: a small file half written under its own name, half of
    // the big one under its part name, and a file the source does not have.
    let interrupted = || {
        fs::create_dir_all(part.join("sub dir/deeper")).unwrap();
        fs::write(part.join("sub dir/deeper/small"), [7u8; 300]).unwrap();
        let big = fs::read(tree.join("sub dir/big.bin")).unwrap();
        fs::write(part.join("sub dir/.big.bin.wirespeed-part"), &big[..big.len() / 2]).unwrap();
        fs::write(part.join("stray"), b"not in the source").unwrap();
    };
    let cp = |extra: &[&str]| run(wirespeed().args(["cp", "-r", "-p"]).args(extra).arg(&tree).arg(&copy));

    interrupted();
    let held = fs::File::open(&part).unwrap();
    // SAFETY: plain syscall on a descriptor we own.
    assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX) }, 0);
    let out = cp(&[]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("another copy is writing there"), "{said}");
    assert!(!copy.exists());
    drop(held);

    for resume in [true, false] {
        let out = cp(if resume { &["--resume"] } else { &[] });
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(snapshot(&tree, true), snapshot(&copy, true), "resume: {resume}");
        assert!(!part.exists());
        fs::remove_dir_all(&copy).unwrap();
        interrupted();
    }
}

/// Small files whose bytes are not in memory are read while the walk goes on, and still
/// arrive whole, each under its own name: sizes from empty to the largest sent inline, in
/// several directories, dropped from the page cache first (where the filesystem can).
#[test]
fn cp_copies_a_tree_whose_files_are_not_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("cold");
    for i in 0..400u32 {
        let sub = tree.join(format!("d{}", i % 7));
        fs::create_dir_all(&sub).unwrap();
        let len = (i as usize * 997) % (64 << 10);
        let data: Vec<u8> = (0..len as u32).map(|k| (k.wrapping_mul(31) ^ i) as u8).collect();
        fs::write(sub.join(format!("f{i}")), &data).unwrap();
    }
    // Written back first: the page cache keeps dirty pages.
    // SAFETY: plain syscall.
    unsafe { libc::sync() };
    evict(&tree);
    // Also under a small descriptor limit: the files still being read stay within it.
    for limit in [None, Some(64)] {
        let copy = dir.path().join(format!("copy-{limit:?}"));
        let mut cmd = wirespeed();
        cmd.args(["cp", "-r", "-p"]).arg(&tree).arg(&copy);
        if let Some(n) = limit {
            few_descriptors(&mut cmd, n);
            evict(&tree);
        }
        let out = run(&mut cmd);
        assert!(out.status.success(), "{limit:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(snapshot(&tree, true), snapshot(&copy, true), "{limit:?}");
    }
}

/// Drops the files under `root` from the page cache, where the filesystem can.
fn evict(root: &std::path::Path) {
    use std::os::unix::io::AsRawFd;
    for d in fs::read_dir(root).unwrap() {
        for f in fs::read_dir(d.unwrap().path()).unwrap() {
            let f = fs::File::open(f.unwrap().path()).unwrap();
            // SAFETY: advice on a descriptor we hold open.
            unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        }
    }
}

/// `--sync` leaves alone the files the destination has with the same size and time (their
/// inodes stay) and copies the rest; `--no-clobber` replaces nothing that is there. Both
/// locally and to a remote end, whose agent gets the flags and reports what it kept.
#[test]
fn sync_copies_only_what_changed_and_no_clobber_replaces_nothing() {
    use std::os::unix::fs::MetadataExt;
    let sshd = Sshd::start();
    let dir = tempfile::tempdir().unwrap();
    let ino = |p: &std::path::Path| fs::metadata(p).unwrap().ino();
    let write_at = |p: &std::path::Path, data: &[u8], secs: u64| {
        fs::write(p, data).unwrap();
        let t = std::time::UNIX_EPOCH + Duration::from_secs(secs);
        fs::File::options().write(true).open(p).unwrap().set_modified(t).unwrap();
    };
    for (name, is_remote) in [("local", false), ("remote", true)] {
        let src = dir.path().join(format!("src-{name}"));
        fs::create_dir_all(src.join("sub")).unwrap();
        // Two inline files and two large ones (sent in chunks), one of each to be edited.
        write_at(&src.join("small"), b"stays as it is", 1_000);
        write_at(&src.join("edited"), b"version 1", 1_000);
        write_at(&src.join("sub/large"), &vec![7u8; 3 << 20], 1_000);
        write_at(&src.join("sub/large-edited"), &vec![1u8; 3 << 20], 1_000);
        let dst = dir.path().join(format!("dst-{name}"));
        fs::create_dir(&dst).unwrap();
        let to = if is_remote { remote(&dst) } else { dst.clone().into_os_string() };
        let cp = |flags: &[&str]| {
            let mut c = if is_remote { sshd.cp() } else { wirespeed() };
            if !is_remote {
                c.arg("cp");
            }
            let out = run(c.arg("-r").args(flags).arg(&src).arg(&to));
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            assert!(out.status.success(), "{name} {flags:?}: {stderr}");
            stderr
        };
        let copy = dst.join(format!("src-{name}"));

        let first = cp(&["--sync"]);
        assert!(!first.contains("kept"), "{first}");
        assert_eq!(snapshot(&src, true), snapshot(&copy, true), "--sync keeps times, as -p does");
        let before = |f: &str| ino(&copy.join(f));
        let (small, large) = (before("small"), before("sub/large"));

        // Same sizes, other contents and times; and a new file.
        write_at(&src.join("edited"), b"version 2", 2_000);
        write_at(&src.join("sub/large-edited"), &vec![2u8; 3 << 20], 2_000);
        write_at(&src.join("new"), b"new", 2_000);
        let second = cp(&["--sync"]);
        assert!(second.contains("5 files, ") && second.contains("2 files (3145742 bytes) kept"), "{second}");
        assert_eq!(snapshot(&src, true), snapshot(&copy, true));
        assert_eq!((ino(&copy.join("small")), ino(&copy.join("sub/large"))), (small, large), "kept, not rewritten");

        // --no-clobber: a file changed at the destination stays; what is missing arrives.
        write_at(&copy.join("edited"), b"edited there", 3_000);
        write_at(&src.join("edited"), b"version 3", 4_000);
        fs::remove_file(copy.join("sub/large")).unwrap();
        let third = cp(&["--no-clobber"]);
        assert!(third.contains("4 files ("), "{third}");
        assert_eq!(fs::read(copy.join("edited")).unwrap(), b"edited there");
        assert_eq!(fs::read(copy.join("sub/large")).unwrap(), vec![7u8; 3 << 20]);
    }
}

/// `--delete` removes what the copied directories hold beyond the source's: files, whole
/// directories, and symlinks (never what they point to); nothing beside the tree's root.
#[test]
fn delete_removes_only_what_the_source_lacks() {
    let sshd = Sshd::start();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("a"), b"a").unwrap();
    fs::write(src.join("sub/b"), vec![3u8; 100_000]).unwrap();
    std::os::unix::fs::symlink("a", src.join("link")).unwrap();
    let dst = dir.path().join("dst");
    fs::create_dir(&dst).unwrap();
    let out = run(sshd.cp().args(["-r", "--sync"]).arg(&src).arg(remote(&dst)));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let copy = dst.join("src");
    let outside = dir.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("precious"), b"keep me").unwrap();
    fs::write(copy.join("extra"), b"x").unwrap();
    fs::create_dir_all(copy.join("sub/old/deeper")).unwrap();
    fs::write(copy.join("sub/old/deeper/f"), b"f").unwrap();
    std::os::unix::fs::symlink(&outside, copy.join("sub/to-outside")).unwrap();
    fs::write(dst.join("beside"), b"not part of the tree").unwrap();
    fs::write(src.join("a"), b"A").unwrap();

    // A dry run lists what would change, at either end of ssh or both, and changes nothing.
    let before = snapshot(&dst, true);
    let list = |d: &std::path::Path| {
        let d = d.display();
        let mut v = vec![
            format!("{d}/src/a"),
            format!("deleting {d}/src/extra"),
            format!("deleting {d}/src/sub/old/"),
            format!("deleting {d}/src/sub/to-outside"),
        ];
        v.sort();
        v
    };
    let here = |p: &std::path::Path| p.as_os_str().to_owned();
    let cases = [
        (here(&src), remote(&dst)),
        (remote(&src), here(&dst)),
        (remote(&src), remote(&dst)),
        (here(&src), here(&dst)),
    ];
    for (from, to) in cases {
        let out = run(sshd.cp().args(["-r", "--sync", "--delete", "--dry-run"]).arg(&from).arg(&to));
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{said}");
        assert!(said.contains("dry run: 1 files (1 bytes) would be copied, 1 kept, 3 deleted"), "{said}");
        let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect();
        lines.sort();
        assert_eq!(lines, list(&dst), "{from:?} to {to:?}");
        assert_eq!(snapshot(&dst, true), before, "a dry run changes nothing");
    }
    let out = run(wirespeed().args(["cp", "-r", "--dry-run"]).arg(&src).arg(dir.path().join("new")));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).lines().any(|l| l.ends_with("new/sub/b")));
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 3, "nothing new beside src, dst and outside");

    let out = run(sshd.cp().args(["-r", "--sync", "--delete"]).arg(&src).arg(remote(&dst)));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && said.contains(", 3 deleted"), "{said}");
    assert_eq!(snapshot(&src, true), snapshot(&copy, true));
    assert_eq!(fs::read(outside.join("precious")).unwrap(), b"keep me");
    assert!(dst.join("beside").exists());

    let out = run(wirespeed().args(["cp", "--delete"]).arg(src.join("a")).arg(&dst));
    assert_eq!(out.status.code(), Some(2), "--delete needs -r");
}

/// `--exclude`, as rsync reads it: names, anchored paths and directories are left out, and with
/// `--delete` what the patterns match at the destination stays while the rest goes.
#[test]
fn exclude_leaves_names_out_and_delete_keeps_them() {
    let sshd = Sshd::start();
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    for d in ["sub/cache", "cache", "logs", ".git"] {
        fs::create_dir_all(tree.join(d)).unwrap();
    }
    for (f, b) in [("a.txt", "a"), ("b.tmp", "t"), ("sub/c.tmp", "s"), ("sub/keep", "k"), ("cache/x", "c")] {
        fs::write(tree.join(f), b).unwrap();
    }
    for (f, b) in [("sub/cache/y", "y"), ("logs/l", "l"), (".git/HEAD", "g"), ("cache-file", "f")] {
        fs::write(tree.join(f), b).unwrap();
    }
    let excludes = ["--exclude", "*.tmp", "--exclude", "cache/", "--exclude", "/tree/logs", "--exclude", ".git"];
    let names = |root: &std::path::Path| snapshot(root, false).into_keys().collect::<Vec<_>>();
    let expect: Vec<Vec<u8>> =
        ["", "a.txt", "cache-file", "sub", "sub/keep"].iter().map(|s| s.as_bytes().to_vec()).collect();

    let local = dir.path().join("local");
    let out = run(wirespeed().args(["cp", "-r"]).args(excludes).arg(&tree).arg(&local));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(names(&local), expect);
    // The same patterns from a file, as rsync's --exclude-from reads one, over ssh.
    let list = dir.path().join("excludes");
    fs::write(&list, "# build leftovers\n*.tmp\n\ncache/\n; and more\n/tree/logs\n.git\n").unwrap();
    let from_file = dir.path().join("from-file");
    let out = run(sshd.cp().arg("-r").arg("--exclude-from").arg(&list).arg(&tree).arg(remote(&from_file)));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(names(&from_file), expect);

    // A full copy first; then, with --delete, excluded names there stay, unsent ones go.
    let dst = dir.path().join("dst");
    fs::create_dir(&dst).unwrap();
    let out = run(sshd.cp().arg("-r").arg(&tree).arg(remote(&dst)));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let copy = dst.join("tree");
    fs::write(copy.join("extra"), b"x").unwrap();
    fs::write(copy.join("sub/local.tmp"), b"mine").unwrap();
    let out = run(sshd
        .cp()
        .args(["-r", "--delete", "--exclude", "*.tmp", "--exclude", "cache/"])
        .arg(&tree)
        .arg(remote(&dst)));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && said.contains(", 1 deleted"), "{said}");
    assert!(!copy.join("extra").exists());
    for kept in ["sub/local.tmp", "b.tmp", "cache/x", "sub/cache/y", "logs/l"] {
        assert!(copy.join(kept).exists(), "{kept}");
    }

    let out = run(wirespeed().args(["cp", "-r", "--exclude", "a[b"]).arg(&tree).arg(dir.path().join("never")));
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!dir.path().join("never").exists());
}

/// `n` consecutive ports free now, below the range the system hands out on its own.
fn free_ports(n: u16) -> u16 {
    let mut base = 20_000 + (std::process::id() % 500) as u16 * 16;
    loop {
        let all_free = (base..base + n).all(|p| std::net::TcpListener::bind(("0.0.0.0", p)).is_ok());
        if all_free {
            return base;
        }
        base += n;
    }
}

/// `--ports` confines where the remote ends listen, for firewalls: they take free ports of
/// the range, skipping taken ones, and fail with one clear line when every one is taken (the
/// agent's own words, with its exit code).
#[test]
fn remote_ends_listen_only_on_the_ports_they_are_given() {
    let sshd = Sshd::start();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("f");
    fs::write(&src, b"through a firewall").unwrap();
    let base = free_ports(4);
    let _taken: Vec<_> = (base..base + 2).map(|p| std::net::TcpListener::bind(("0.0.0.0", p)).unwrap()).collect();

    let full = format!("{base}-{}", base + 1);
    let out = run(sshd.cp().args(["--ports", &full]).arg(&src).arg(remote(&dir.path().join("no"))));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "an I/O error, as for any address in use: {stderr}");
    assert!(stderr.contains(&format!("every port in {full} is taken")) && stderr.lines().count() == 1, "{stderr}");
    assert!(!dir.path().join("no").exists());

    // A copy skips the taken ports; a pipe's last stage takes two (its input and output).
    let open = format!("{base}-{}", base + 3);
    let out =
        run(sshd.cp().args(["--ports", &open, "--transport", "tcp"]).arg(&src).arg(remote(&dir.path().join("yes"))));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(fs::read(dir.path().join("yes")).unwrap(), b"through a firewall");
    let mut pipe = sshd.tool("pipe");
    let out = run(pipe.args(["--ports", &open, "127.0.0.1:cat"]).stdin(fs::File::open(&src).unwrap()));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, b"through a firewall");
}

/// A tree of more large (not inline) files than the process may open copies, and resumes,
/// under a small descriptor limit: the source holds only some open ahead of the transfer,
/// and the sink closes each file as it finishes it.
#[test]
fn trees_of_more_large_files_than_descriptors_copy_and_resume() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("big");
    fs::create_dir(&src).unwrap();
    for i in 0..150u32 {
        let data: Vec<u8> = (0..70_000 + i).map(|b| (b.wrapping_mul(31) ^ i) as u8).collect();
        fs::write(src.join(format!("f{i:03}")), data).unwrap();
    }
    for transport in ["auto", "tcp", "ucx", "ofi+shm", "ofi+tcp"] {
        let copy = dir.path().join(format!("copy-{transport}"));
        let mut cmd = wirespeed();
        few_descriptors(cmd.args(["cp", "-r", "--transport", transport]).arg(&src).arg(&copy), 64);
        let out = run(&mut cmd);
        assert!(out.status.success(), "{transport}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(snapshot(&src, false), snapshot(&copy, false), "{transport}");
    }

    // An interrupted copy that wrote every file but renamed none: each part file is checked,
    // kept and renamed, none opened before its turn.
    let resumed = dir.path().join("resumed");
    fs::create_dir_all(resumed.join("big")).unwrap();
    for e in fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        let part = format!(".{}.wirespeed-part", e.file_name().to_str().unwrap());
        fs::copy(e.path(), resumed.join("big").join(part)).unwrap();
    }
    let mut cmd = wirespeed();
    few_descriptors(cmd.args(["cp", "-r", "--resume"]).arg(&src).arg(&resumed), 64);
    let out = run(&mut cmd);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("already in place"), "{said}");
    assert_eq!(snapshot(&src, false), snapshot(&resumed.join("big"), false));
}

/// A 2 MiB tmpfs, unmounted when dropped.
struct TinyDisk(tempfile::TempDir);

impl TinyDisk {
    /// `None` where this user may not mount (tests run as root in CI).
    fn mount() -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount").args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"]).arg(dir.path()).status();
        ok.is_ok_and(|s| s.success()).then_some(TinyDisk(dir))
    }
}

impl Drop for TinyDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

/// A full disk fails the copy with the I/O exit code and one line; what does lie under a
/// final name is whole.
#[test]
fn a_full_disk_fails_the_copy_and_leaves_nothing_half_written() {
    let Some(disk) = TinyDisk::mount() else {
        // Straight to stderr: the test harness would swallow eprintln! from a passing test.
        let _ = writeln!(std::io::stderr(), "a_full_disk_fails_the_copy: SKIPPED, cannot mount a tmpfs here");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.bin");
    fs::write(&big, (0..5_000_000u32).map(|i| (i % 253) as u8).collect::<Vec<_>>()).unwrap();
    let tree = dir.path().join("tree");
    fs::create_dir(&tree).unwrap();
    for i in 0..1000u32 {
        fs::write(tree.join(format!("f{i:04}")), vec![i as u8; 4096]).unwrap();
    }
    for transport in ["auto", "tcp"] {
        for (src, flags) in [(&big, &[][..]), (&tree, &["-r"][..])] {
            let to = disk.0.path().join(transport);
            fs::create_dir_all(&to).unwrap();
            let out = run(wirespeed().arg("cp").args(flags).args(["--transport", transport]).arg(src).arg(&to));
            let said = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(5), "{transport}: {said}");
            assert!(said.contains("No space left") && said.lines().count() == 1, "{transport}: {said}");
            assert!(!to.join("big.bin").exists(), "{transport}: the big file is not in place");
            if let Ok(landed) = fs::read_dir(to.join("tree")) {
                for e in landed {
                    let e = e.unwrap();
                    let name = e.file_name();
                    assert_eq!(fs::read(e.path()).unwrap(), fs::read(tree.join(&name)).unwrap(), "{name:?}");
                }
            }
            fs::remove_dir_all(&to).unwrap();
        }
    }
}

#[test]
fn cp_reports_bad_sources_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(wirespeed().arg("cp").arg(dir.path().join("missing")).arg(dir.path().join("x")));
    assert_eq!(out.status.code(), Some(5), "an I/O error");
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
    let out = run(wirespeed().arg("cp").arg(dir.path()).arg(dir.path().join("x")));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("use -r"));
    // Before starting anything remote: this ssh would fail if it were run.
    let out = run(wirespeed().args(["cp", "-e", "/nonexistent/ssh"]).arg(dir.path().join("missing")).arg("h:/x"));
    assert_eq!(out.status.code(), Some(5), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing"));
}

/// `DIR/` names a directory, as with `cp`: a file copied to one that does not exist fails
/// and leaves nothing behind, instead of taking the name. Errors name what the user gave.
#[test]
fn a_file_never_takes_a_name_written_as_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("small.txt");
    fs::write(&small, b"a few bytes").unwrap();
    let mut to = dir.path().join("missing").into_os_string();
    to.push("/");
    let out = run(wirespeed().arg("cp").arg(&small).arg(&to));
    assert_eq!(out.status.code(), Some(5), "an I/O error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Not a directory"));
    let names: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["small.txt"], "nothing else appeared");
    // A file too big to travel inline, into a directory that is missing: the error names the
    // file as given, not the hidden part name it would have been written under.
    let big = dir.path().join("big.bin");
    fs::write(&big, vec![1u8; 4 << 20]).unwrap();
    let out = run(wirespeed().arg("cp").arg(&big).arg(dir.path().join("missing/big.bin")));
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{said}");
    assert!(said.contains("missing/big.bin") && !said.contains("wirespeed-part"), "{said}");
}

/// Bytes of `p` that sit in the page cache.
fn cached(p: &std::path::Path) -> u64 {
    use std::os::fd::AsRawFd;
    let f = fs::File::open(p).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    let mut pages = vec![0u8; len.div_ceil(4096)];
    // SAFETY: a read-only shared mapping of an open file, unmapped before it is dropped;
    // mincore writes one byte per page into `pages`, which has room for each.
    unsafe {
        let at = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, f.as_raw_fd(), 0);
        assert_ne!(at, libc::MAP_FAILED);
        assert_eq!(libc::mincore(at, len, pages.as_mut_ptr()), 0);
        libc::munmap(at, len);
    }
    pages.iter().filter(|&&p| p & 1 != 0).count() as u64 * 4096
}

/// `--direct` copies large files past the page cache at both ends, tails, holes and all; a
/// copy without it leaves them cached, as a check that the measure tells the two apart.
#[test]
fn direct_copies_leave_the_page_cache_alone() {
    use std::os::fd::AsRawFd;
    let sshd = Sshd::start();
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    fs::create_dir(&tree).unwrap();
    let big = tree.join("weights.bin");
    let mut data: Vec<u8> = (0..(9 << 20) + 1234u32).map(|i| (i.wrapping_mul(2654435761) >> 24) as u8).collect();
    data[4 << 20..6 << 20].fill(0);
    let f = fs::File::create(&big).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(&data[..4 << 20], 0).unwrap();
    f.write_all_at(&data[6 << 20..], 6 << 20).unwrap();
    f.sync_all().unwrap();
    fs::write(tree.join("small.txt"), b"small files go as they always do").unwrap();
    // Page-cache effects show only where O_DIRECT bypasses the cache; tmpfs accepts it and
    // caches anyway.
    // SAFETY: statfs fills one struct we own.
    let on_tmpfs = unsafe {
        let mut s: libc::statfs = std::mem::zeroed();
        let path = std::ffi::CString::new(dir.path().as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(libc::statfs(path.as_ptr(), &mut s), 0);
        s.f_type == libc::TMPFS_MAGIC
    };
    for (mode, direct) in [("direct", true), ("cached", false)] {
        // SAFETY: advice on a descriptor we own; it only drops clean cached pages.
        assert_eq!(unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) }, 0);
        let into = dir.path().join(mode);
        let mut cp = sshd.cp();
        cp.arg("-r").args(direct.then_some("--direct")).arg(&tree).arg(remote(&into));
        let out = run(&mut cp);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        // Before anything here reads the files.
        let (src, dst) = (cached(&big), cached(&into.join("weights.bin")));
        if !on_tmpfs && direct {
            // The tail, less than a block, goes through the cache.
            assert!(src <= 4096 && dst <= 4096, "cached after --direct: source {src}, copy {dst}");
        } else if !on_tmpfs {
            assert!(src >= 7 << 20 && dst >= 7 << 20, "cached without --direct: source {src}, copy {dst}");
        }
        assert_eq!(snapshot(&tree, false), snapshot(&into, false));
        assert!(allocated(&into.join("weights.bin")) < 8 << 20, "holes stay holes");
    }
}
