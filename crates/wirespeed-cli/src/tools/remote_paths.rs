//! How an agent reads the paths `cp` hands it, as scp and rsync users type them: a leading
//! `~` or `~user` is that home directory, and a source that does not exist as written but
//! holds `*`, `?` or `[` is a pattern for the names that match it. The initiator quotes every
//! path, so that the remote shell changes none of them; this is where they are read.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use wirespeed_files::FilesError;

/// The paths a source agent copies: each with its `~` expanded, and patterns replaced by
/// what they match, sorted (as a shell lists them).
pub fn sources(paths: Vec<PathBuf>) -> Result<Vec<PathBuf>, FilesError> {
    let mut out = Vec::with_capacity(paths.len());
    for p in paths {
        let p = home(p)?;
        match matches(&p)? {
            Some(found) => out.extend(found),
            None => out.push(p),
        }
    }
    Ok(out)
}

/// `~` and `~/x` lie in our home directory, `~user` and `~user/x` in that user's. A sink's
/// destination, and a pipeline's file, is read so (never as a pattern).
pub fn home(path: PathBuf) -> Result<PathBuf, FilesError> {
    let bytes = path.as_os_str().as_bytes();
    let Some(rest) = bytes.strip_prefix(b"~") else { return Ok(path) };
    let end = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
    let (user, tail) = rest.split_at(end);
    let dir = if user.is_empty() {
        match std::env::var_os("HOME") {
            Some(h) if !h.is_empty() => PathBuf::from(h),
            _ => user_home(nix::unistd::User::from_uid(nix::unistd::getuid()), "this user")?,
        }
    } else {
        let name = String::from_utf8_lossy(user);
        user_home(nix::unistd::User::from_name(&name), &name)?
    };
    let mut joined = dir.into_os_string().into_vec();
    joined.extend_from_slice(tail);
    Ok(PathBuf::from(OsString::from_vec(joined)))
}

fn user_home(found: nix::Result<Option<nix::unistd::User>>, name: &str) -> Result<PathBuf, FilesError> {
    match found {
        Ok(Some(u)) => Ok(u.dir),
        _ => Err(FilesError::Usage(format!("~{name}: no such user"))),
    }
}

/// What `pattern` matches, if it is one: `None` when the path exists as written or holds no
/// pattern characters. A pattern that matches nothing is the error a missing file would be.
fn matches(pattern: &Path) -> Result<Option<Vec<PathBuf>>, FilesError> {
    let Some(text) = pattern.to_str() else { return Ok(None) };
    if !text.contains(['*', '?', '[']) || pattern.symlink_metadata().is_ok() {
        return Ok(None);
    }
    // As a shell reads them: `*` stays within a name and does not match a leading dot.
    let options =
        glob::MatchOptions { case_sensitive: true, require_literal_separator: true, require_literal_leading_dot: true };
    let Ok(found) = glob::glob_with(text, options) else { return Ok(None) };
    let mut found: Vec<PathBuf> = found.filter_map(Result::ok).collect();
    if found.is_empty() {
        let none = std::io::Error::new(std::io::ErrorKind::NotFound, "nothing matches");
        return Err(FilesError::io(pattern, none));
    }
    found.sort();
    Ok(Some(found))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leading_tilde_is_a_home_directory() {
        let me = PathBuf::from(std::env::var_os("HOME").unwrap());
        assert_eq!(home("~".into()).unwrap(), me);
        assert_eq!(home("~/a b".into()).unwrap(), me.join("a b"));
        let root = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(0)).unwrap().unwrap();
        assert_eq!(home(format!("~{}/x", root.name).into()).unwrap(), root.dir.join("x"));
        assert_eq!(home("a/~b".into()).unwrap(), PathBuf::from("a/~b"));
        assert!(matches!(home("~no-such-user-here/x".into()), Err(FilesError::Usage(_))));
    }

    #[test]
    fn patterns_become_the_sorted_names_they_match() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for name in ["b.csv", "a.csv", ".hidden.csv", "c.txt", "lit*al"] {
            std::fs::write(d.join(name), b"x").unwrap();
        }
        std::fs::create_dir(d.join("sub")).unwrap();
        std::fs::write(d.join("sub/d.csv"), b"x").unwrap();
        let got = sources(vec![d.join("*.csv"), d.join("c.???")]).unwrap();
        assert_eq!(got, [d.join("a.csv"), d.join("b.csv"), d.join("c.txt")]);
        // A name that exists as written is itself, pattern characters or not.
        assert_eq!(sources(vec![d.join("lit*al")]).unwrap(), [d.join("lit*al")]);
        assert_eq!(sources(vec![d.join("*/d.csv")]).unwrap(), [d.join("sub/d.csv")]);
        let none = sources(vec![d.join("*.parquet")]).unwrap_err();
        assert!(matches!(none, FilesError::Io { .. }) && none.to_string().contains("nothing matches"), "{none}");
    }
}
