//! Reading a file only as far as its bytes are already in memory. A read that would wait for
//! storage returns at once instead (Linux's `RWF_NOWAIT`), and the kernel has by then started
//! reading those bytes in. The walk goes on with other files and comes back for this one, so
//! a tree on a cold disk is read many files at a time, not one storage round trip after another.

use std::fs::File;
use std::io;
use std::mem::MaybeUninit;
use std::os::unix::io::AsRawFd;

/// Fills `buf` from the start of `file` and returns how many bytes it read (fewer at the end
/// of the file). Unless `wait`, returns `None` instead of waiting for storage, which has by
/// then begun reading the rest in. Without `wait` an error may only say that the filesystem
/// cannot read this way; a read with `wait` then tells.
pub(crate) fn read_start(file: &File, buf: &mut [MaybeUninit<u8>], wait: bool) -> io::Result<Option<usize>> {
    let flags = if wait { 0 } else { libc::RWF_NOWAIT };
    let mut n = 0;
    while n < buf.len() {
        let iov = libc::iovec { iov_base: buf[n..].as_mut_ptr().cast(), iov_len: buf.len() - n };
        // SAFETY: one iovec over the unfilled part of `buf`, which outlives the call (the kernel
        // only writes it); `file` is an open descriptor. A positioned read leaves its offset.
        let got = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, n as libc::off_t, flags) };
        match got {
            0 => break,
            k if k > 0 => n += k as usize,
            _ => match io::Error::last_os_error() {
                e if e.kind() == io::ErrorKind::WouldBlock && !wait => return Ok(None),
                e if e.kind() == io::ErrorKind::Interrupted => {}
                e => return Err(e),
            },
        }
    }
    Ok(Some(n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, Write};

    #[test]
    fn reads_a_file_in_memory_whole_and_leaves_its_offset() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&[7u8; 10_000]).unwrap();
        let mut buf = vec![MaybeUninit::uninit(); 12_000];
        // Just written, so in the page cache; a filesystem that cannot say reports an error.
        match read_start(&f, &mut buf, false) {
            Ok(Some(n)) => assert_eq!((n, init(&buf[..n]).iter().all(|&b| b == 7)), (10_000, true)),
            Ok(None) => panic!("bytes just written were not in memory"),
            Err(e) => assert!(e.raw_os_error().is_some()),
        }
        assert_eq!(f.stream_position().unwrap(), 10_000, "the write's offset, untouched");
    }

    #[test]
    fn a_file_out_of_memory_is_read_whole_or_not_at_all() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap();
        // SAFETY: advice on a descriptor we hold open.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        let mut buf = vec![MaybeUninit::uninit(); data.len()];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        // Dropped from memory on a disk, not on tmpfs; once storage has read it in, it is whole.
        loop {
            match read_start(&f, &mut buf, false) {
                Ok(Some(n)) => break assert!(n == data.len() && init(&buf) == data),
                Ok(None) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(5))
                }
                Ok(None) => panic!("storage never read the file in"),
                Err(e) => break assert!(e.raw_os_error().is_some()),
            }
        }
        assert_eq!(read_start(&f, &mut buf, true).unwrap(), Some(data.len()));
        assert!(init(&buf) == data);
    }

    fn init(buf: &[MaybeUninit<u8>]) -> &[u8] {
        // SAFETY: callers pass only what `read_start` filled.
        unsafe { std::slice::from_raw_parts(buf.as_ptr().cast(), buf.len()) }
    }
}
