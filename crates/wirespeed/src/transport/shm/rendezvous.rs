//! The Unix socket a shared-memory connection starts on: a path in the file system, or, for a
//! name that starts with `@`, Linux's abstract namespace, which leaves no file behind however the
//! listener ends (and is reachable only from the same network namespace).

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::Path;

use crate::error::{Error, Result};

/// The abstract name in `path`, if it is one.
fn abstract_name(path: &Path) -> Option<&[u8]> {
    use std::os::unix::ffi::OsStrExt;
    path.as_os_str().as_bytes().strip_prefix(b"@")
}

pub(super) fn connect(path: &Path) -> io::Result<UnixStream> {
    match abstract_name(path) {
        Some(name) => UnixStream::connect_addr(&SocketAddr::from_abstract_name(name)?),
        None => UnixStream::connect(path),
    }
}

/// Binds `path`, replacing the socket file of a listener that is gone but never a live
/// listener's or another file; the returned closure removes the file again (nothing to do for
/// an abstract name). Flight's `grpc+unix` listener binds through it too.
pub fn bind(path: &Path) -> Result<(UnixListener, Box<dyn FnOnce() + Send + Sync>)> {
    let cannot =
        |e: io::Error| Error::from(io::Error::new(e.kind(), format!("cannot listen on {}: {e}", path.display())));
    if let Some(name) = abstract_name(path) {
        let listener =
            UnixListener::bind_addr(&SocketAddr::from_abstract_name(name).map_err(cannot)?).map_err(cannot)?;
        return Ok((listener, Box::new(|| {})));
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        let in_use =
            |what: &str| Error::from(io::Error::new(io::ErrorKind::AddrInUse, format!("{} {what}", path.display())));
        if !meta.file_type().is_socket() {
            return Err(in_use("exists and is not a socket"));
        }
        if UnixStream::connect(path).is_ok() {
            return Err(in_use("is in use"));
        }
        let _ = std::fs::remove_file(path); // the stale socket of a dead listener
    }
    let listener = UnixListener::bind(path).map_err(cannot)?;
    let owned = path.to_path_buf();
    Ok((listener, Box::new(move || drop(std::fs::remove_file(owned)))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_abstract_name_leaves_no_file_and_frees_itself() {
        let name = format!("@wirespeed-test-{}", std::process::id());
        let (listener, cleanup) = bind(Path::new(&name)).unwrap();
        connect(Path::new(&name)).unwrap();
        assert!(!Path::new(&name).exists());
        assert_eq!(bind(Path::new(&name)).err().map(|e| e.to_string().contains("cannot listen")), Some(true));
        drop(listener);
        cleanup();
        assert!(connect(Path::new(&name)).is_err());
        drop(bind(Path::new(&name)).unwrap());
    }
}
