//! `send` and `recv`: files and pipes over many streams, refusals, a source changing mid-transfer,
//! encryption on the wire, and a key generated for the user.

use super::*;

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
