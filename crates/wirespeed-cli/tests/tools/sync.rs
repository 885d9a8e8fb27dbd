//! `cp --sync`, `--no-clobber`, `--delete` and `--exclude`: what rsync users expect.

use super::*;

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
