//! `cp` as scp users run it: local, remote and remote-to-remote trees, several sources, scp's
//! path forms, trees not in memory, and the page cache left alone.

use super::*;

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
        let v6 = Sshd::start_at("::1");
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
