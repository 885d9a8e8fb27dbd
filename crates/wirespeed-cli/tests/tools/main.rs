//! `send`, `recv` and `cp` as users run them: real processes, real sockets and shared
//! memory, and a real sshd on 127.0.0.1 for the remote ends.

#[path = "../support/mod.rs"]
mod support;

mod between_hosts;
mod cp;
mod cp_failures;
mod send_recv;
mod sync;

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
