//! Where a path lives: `[user@]host:path` is remote (as in scp), and so is `[user@][addr]:path`
//! for an IPv6 address; anything with a `/` before its first `:` is local.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

/// A copy's source or destination.
#[derive(Debug, PartialEq, Eq)]
pub enum Place {
    /// A path on this host.
    Local(PathBuf),
    /// `HOST:PATH` (or `USER@HOST:PATH`), as scp names one.
    Remote {
        /// The host, as ssh names it.
        host: String,
        /// The path there.
        path: OsString,
    },
}

impl Place {
    /// The place an argument names, as scp reads it: a `:` before any `/` names a host.
    pub fn parse(arg: &OsStr) -> Place {
        match split_host(arg.as_bytes()) {
            Some((host, path)) => {
                let path = if path.is_empty() { b"." } else { path };
                Place::Remote { host, path: OsString::from_vec(path.to_vec()) }
            }
            None => Place::Local(PathBuf::from(arg)),
        }
    }
}

/// `[user@]host:rest` or `[user@][addr]:rest` as the host (IPv6 brackets dropped, as ssh
/// takes it) and the rest; `None` when nothing before the first `:` could be a host.
pub fn split_host(b: &[u8]) -> Option<(String, &[u8])> {
    let bracket = b
        .iter()
        .position(|c| *c == b'[')
        .filter(|&open| (open == 0 || b[open - 1] == b'@') && !b[..open].iter().any(|c| matches!(c, b'/' | b':')));
    let colon = match bracket {
        Some(open) => b[open..].windows(2).position(|w| w == b"]:").map(|i| open + i + 1),
        None => b.iter().position(|c| *c == b':'),
    }?;
    if colon == 0 || b[..colon].contains(&b'/') {
        return None;
    }
    Some((String::from_utf8_lossy(&b[..colon]).replace(['[', ']'], ""), &b[colon + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operands_are_local_unless_they_name_a_host() {
        let r = |h: &str, p: &str| Place::Remote { host: h.into(), path: p.into() };
        assert_eq!(Place::parse(OsStr::new("host:/a b")), r("host", "/a b"));
        assert_eq!(Place::parse(OsStr::new("me@host:")), r("me@host", "."));
        assert_eq!(Place::parse(OsStr::new("./a:b")), Place::Local("./a:b".into()));
        assert_eq!(Place::parse(OsStr::new("/x/y")), Place::Local("/x/y".into()));
        assert_eq!(Place::parse(OsStr::new(":x")), Place::Local(":x".into()));
        assert_eq!(Place::parse(OsStr::new("[::1]:/a:b")), r("::1", "/a:b"));
        assert_eq!(Place::parse(OsStr::new("me@[fe80::1%eth0]:")), r("me@fe80::1%eth0", "."));
        assert_eq!(Place::parse(OsStr::new("./[x]:y")), Place::Local("./[x]:y".into()));
    }
}
