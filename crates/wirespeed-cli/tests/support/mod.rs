//! Helpers for tests that run the real binary: a throwaway sshd on 127.0.0.1 (or on hosts made
//! of network namespaces), trees to compare, and child processes that never outlive their deadline.

#![allow(dead_code)]

pub mod archives;
pub mod netns;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_wirespeed");

pub fn wirespeed() -> Command {
    Command::new(BIN)
}

/// Waits for `child` at most `limit`, killing it past that.
pub fn wait_for(child: &mut Child, limit: Duration) -> ExitStatus {
    wait_within(child, limit).unwrap_or_else(|| {
        let _ = child.kill();
        panic!("a wirespeed process ran past {limit:?}");
    })
}

/// The child's status once it ends, or `None` if it is still running after `limit`.
fn wait_within(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            return Some(st);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What each thread of process `pid` waits in, to tell where a hung process is stuck.
fn threads_waiting(pid: u32) -> String {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return String::new() };
    tasks
        .flatten()
        .map(|t| {
            let read = |f: &str| std::fs::read_to_string(t.path().join(f)).unwrap_or_default();
            format!("{} in {}", read("comm").trim(), read("wchan").trim())
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs `c` with at most `n` file descriptors.
pub fn few_descriptors(c: &mut Command, n: u64) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: only setrlimit, which is async-signal-safe, runs in the forked child.
    unsafe {
        c.pre_exec(move || {
            let lim = libc::rlimit { rlim_cur: n, rlim_max: n };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
        })
    }
}

/// Runs a command to its end (at most two minutes), capturing its output.
pub fn run(cmd: &mut Command) -> Output {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    let out = child.stdout.take().unwrap();
    let err = child.stderr.take().unwrap();
    let all = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            r.read_to_end(&mut v).map(|_| v)
        })
    };
    let (out, err) = (all(Box::new(out)), all(Box::new(err)));
    let limit = Duration::from_secs(120);
    let Some(status) = wait_within(&mut child, limit) else {
        let threads = threads_waiting(child.id());
        let _ = child.kill();
        let said = String::from_utf8_lossy(&err.join().unwrap().unwrap()).into_owned();
        panic!("{cmd:?} ran past {limit:?}; its threads: {threads}; it said: {said}");
    };
    Output { status, stdout: out.join().unwrap().unwrap(), stderr: err.join().unwrap().unwrap() }
}

/// A `recv` started in the background; `port` is read from its first stderr line.
pub struct Receiver {
    pub child: Child,
    pub port: u16,
    pub stderr: std::thread::JoinHandle<String>,
}

pub fn start_recv(cmd: &mut Command) -> Receiver {
    let mut child = cmd.stderr(Stdio::piped()).spawn().expect("spawn recv");
    let mut lines = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    lines.read_line(&mut first).unwrap();
    let port = first.trim().rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("{first}"));
    let stderr = std::thread::spawn(move || {
        let mut rest = first;
        let _ = std::io::Read::read_to_string(&mut lines, &mut rest);
        rest
    });
    Receiver { child, port, stderr }
}

/// An sshd on 127.0.0.1 with its own host key, trusting one fresh user key; or the sshds of a
/// [`netns::Hosts`], which its helper runs, reached with that helper's key.
pub struct Sshd {
    children: Vec<Child>,
    dir: Option<tempfile::TempDir>,
    key: PathBuf,
    pub port: u16,
}

impl Sshd {
    pub fn start() -> Sshd {
        Sshd::start_at("127.0.0.1")
    }

    /// An sshd on `addr` (an address of this host's own namespace).
    pub fn start_at(addr: &str) -> Sshd {
        let sshd = Path::new("/usr/sbin/sshd");
        assert!(sshd.exists(), "sshd is missing: `make test` installs openssh-server (scripts/bootstrap.sh)");
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for name in ["host_key", "user_key"] {
            let st = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(d.join(name))
                .status()
                .expect("ssh-keygen");
            assert!(st.success());
        }
        fs::copy(d.join("user_key.pub"), d.join("authorized_keys")).unwrap();
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        // Privilege separation needs this directory; as root we may create it.
        let _ = fs::create_dir_all("/run/sshd");
        let config = format!(
            "Port {port}\nListenAddress {addr}\nHostKey {d}/host_key\nAuthorizedKeysFile {d}/authorized_keys\n\
             PidFile {d}/sshd.pid\nStrictModes no\nUsePAM no\nPermitRootLogin yes\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nSubsystem sftp internal-sftp\n",
            d = d.display()
        );
        let conf = d.join("sshd_config");
        fs::write(&conf, config).unwrap();
        let child =
            Command::new(sshd).args(["-D", "-e", "-f"]).arg(conf).stderr(Stdio::null()).spawn().expect("start sshd");
        let s = Sshd { children: vec![child], key: d.join("user_key"), dir: Some(dir), port };
        s.wait_until_up(addr);
        s
    }

    /// The sshds someone else runs, on `port`, trusting `key`.
    pub fn reached_with(port: u16, key: PathBuf) -> Sshd {
        Sshd { children: Vec::new(), dir: None, key, port }
    }

    fn wait_until_up(&self, addr: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ok = Command::new("ssh")
                .args(self.ssh_args())
                .args([addr, "true"])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|st| st.success());
            if ok {
                return;
            }
            assert!(Instant::now() < deadline, "sshd on {addr} did not come up");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn ssh_args(&self) -> Vec<String> {
        let key = &self.key;
        [
            "-F",
            "/dev/null",
            "-p",
            &self.port.to_string(),
            "-i",
            &key.display().to_string(),
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            "-o",
            "BatchMode=yes",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// The `-e` value for `wirespeed cp`.
    pub fn ssh_command(&self) -> String {
        format!("ssh {}", self.ssh_args().join(" "))
    }

    /// `wirespeed TOOL` set up to reach this sshd (`cp` or `pipe`).
    pub fn tool(&self, tool: &str) -> Command {
        let mut c = wirespeed();
        c.arg(tool).arg("-e").arg(self.ssh_command()).arg("--remote-bin").arg(BIN);
        c
    }

    pub fn cp(&self) -> Command {
        self.tool("cp")
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A temporary directory in this user's home, which is also the remote home of the sshd's
/// user (this host, this user), and its name there: for remote paths that start at `~`.
pub struct InHome {
    pub dir: tempfile::TempDir,
    pub name: String,
    /// This user's name, for `~user` paths.
    pub user: String,
}

pub fn in_home() -> InHome {
    let me = nix::unistd::User::from_uid(nix::unistd::getuid()).unwrap().unwrap();
    let dir = tempfile::tempdir_in(&me.dir).unwrap();
    let name = dir.path().file_name().unwrap().to_str().unwrap().to_string();
    InHome { dir, name, user: me.name }
}

pub fn remote(p: &Path) -> OsString {
    remote_on("127.0.0.1", p)
}

/// `HOST:PATH`.
pub fn remote_on(host: &str, p: &Path) -> OsString {
    let mut s = OsString::from(format!("{host}:"));
    s.push(p);
    s
}

/// What a tree holds, for comparing copies: per path its kind, bytes or target, and
/// (if `meta`) mode and mtime.
pub fn snapshot(root: &Path, meta: bool) -> BTreeMap<Vec<u8>, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let md = fs::symlink_metadata(&p).unwrap();
        let rel = p.strip_prefix(root).unwrap().as_os_str().as_bytes().to_vec();
        let what = if md.is_dir() {
            stack.extend(fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            "dir".to_string()
        } else if md.file_type().is_symlink() {
            format!("link {:?}", fs::read_link(&p).unwrap())
        } else {
            format!("file {:x}", digest(&fs::read(&p).unwrap()))
        };
        let m = if meta && !md.file_type().is_symlink() {
            format!(" mode {:o} mtime {}.{}", md.mode() & 0o7777, md.mtime(), md.mtime_nsec())
        } else {
            String::new()
        };
        out.insert(rel, what + &m);
    }
    out
}

fn digest(b: &[u8]) -> u64 {
    use std::hash::{DefaultHasher, Hasher};
    let mut h = DefaultHasher::new();
    h.write(b);
    h.finish() ^ b.len() as u64
}

/// A tree with the awkward cases: odd names, a symlink, a sparse file, an empty file and
/// directory, and a file of several chunks.
pub fn tricky_tree(root: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let t = root.join("tree");
    fs::create_dir_all(t.join("sub dir/deeper")).unwrap();
    fs::create_dir_all(t.join("empty dir")).unwrap();
    fs::write(t.join("with space.txt"), b"spaces").unwrap();
    fs::write(t.join("new\nline"), b"newline").unwrap();
    fs::write(t.join(OsString::from_vec(b"bad \xff utf8".to_vec())), b"not utf-8").unwrap();
    fs::write(t.join("empty"), b"").unwrap();
    fs::write(t.join("sub dir/deeper/small"), vec![7u8; 1000]).unwrap();
    let big: Vec<u8> = (0..9_500_000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    fs::write(t.join("sub dir/big.bin"), big).unwrap();
    std::os::unix::fs::symlink("sub dir/deeper/small", t.join("link")).unwrap();
    let sparse = fs::File::create(t.join("sparse.img")).unwrap();
    sparse.set_len(64 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&sparse, b"island", 40 << 20).unwrap();
    fs::set_permissions(t.join("with space.txt"), std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
    t
}

/// Bytes a file really occupies on disk.
pub fn allocated(p: &Path) -> u64 {
    fs::metadata(p).unwrap().blocks() * 512
}
