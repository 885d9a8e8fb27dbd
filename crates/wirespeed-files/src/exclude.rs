//! `--exclude` patterns, read as rsync reads them. Paths are matched relative to the copy's
//! top, starting with the copied root's own name (`tree/sub/x.tmp` for `cp -r tree …`):
//! - a pattern without `/` matches a name at any depth (`*.tmp`, `.git`);
//! - one starting with `/` is anchored at the top (`/tree/logs`);
//! - one with `/` inside matches a path's end at a name boundary (`sub/*.tmp`);
//! - a trailing `/` matches directories only (`cache/`).
//!
//! `*` and `?` stay within a name, `**` crosses `/`, `[…]` is a class and `\` escapes.
//! The roots named on the command line are always copied.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use crate::error::{FilesError, Result};

/// A set of patterns, compiled; empty when none were given.
#[derive(Clone, Debug, Default)]
pub struct Excludes {
    patterns: Vec<String>,
    any: GlobSet,
    dirs: GlobSet,
}

impl Excludes {
    /// Patterns as `--exclude` takes them (rsync's: `*.tmp`, `dir/` for directories only); a bad one is an error.
    pub fn new(patterns: &[String]) -> Result<Self> {
        let (mut any, mut dirs) = (GlobSetBuilder::new(), GlobSetBuilder::new());
        for p in patterns {
            let (body, dir_only) = match p.strip_suffix('/') {
                Some(b) => (b, true),
                None => (p.as_str(), false),
            };
            let glob = match body.strip_prefix('/') {
                Some(anchored) => anchored.to_string(),
                None => format!("**/{body}"),
            };
            let bad = |e: &dyn std::fmt::Display| FilesError::Usage(format!("bad --exclude pattern {p:?}: {e}"));
            if body.is_empty() || body.trim_start_matches('/').is_empty() {
                return Err(bad(&"it names nothing"));
            }
            let glob = GlobBuilder::new(&glob)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map_err(|e| bad(e.kind()))?;
            if dir_only { &mut dirs } else { &mut any }.add(glob);
        }
        let built =
            |b: GlobSetBuilder| b.build().map_err(|e| FilesError::Usage(format!("bad --exclude patterns: {e}")));
        Ok(Excludes { patterns: patterns.to_vec(), any: built(any)?, dirs: built(dirs)? })
    }

    /// Whether nothing is excluded.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// The patterns as given, for the sink (see docs/PROTOCOL.md, `Exclude`).
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// Whether the entry at `path` below the top (raw bytes, `/`-separated) is left out.
    pub fn excludes(&self, path: &[u8], is_dir: bool) -> bool {
        let path = Path::new(OsStr::from_bytes(path));
        self.any.is_match(path) || (is_dir && self.dirs.is_match(path))
    }
}

/// `rel` below a root known at the top as `top` (empty when the roots are the top's entries).
pub(crate) fn top_path(top: &[u8], rel: &[u8]) -> Vec<u8> {
    match (top.is_empty(), rel.is_empty()) {
        (true, _) => rel.to_vec(),
        (false, true) => top.to_vec(),
        (false, false) => [top, b"/", rel].concat(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ex(p: &[&str]) -> Excludes {
        Excludes::new(&p.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn names_match_at_any_depth_and_stay_within_a_name() {
        let e = ex(&["*.tmp", ".git"]);
        for p in ["tree/a.tmp", "tree/d/e/b.tmp", "tree/.git", "tree/sub/.git"] {
            assert!(e.excludes(p.as_bytes(), false), "{p}");
        }
        for p in ["tree/a.tmpx", "tree/a.tmp/b", "tree/.github", "tree/x.git"] {
            assert!(!e.excludes(p.as_bytes(), false), "{p}");
        }
        // Inside an excluded directory the walk never looks, so only its own name matters.
        assert!(e.excludes(b"tree/x.tmp", true));
    }

    #[test]
    fn anchored_suffix_and_directory_only_patterns() {
        let e = ex(&["/tree/logs", "sub/*.csv", "cache/", "data/**/raw"]);
        assert!(e.excludes(b"tree/logs", true));
        assert!(!e.excludes(b"tree/x/logs", true), "anchored at the top only");
        assert!(e.excludes(b"tree/sub/a.csv", false));
        assert!(e.excludes(b"tree/deep/sub/a.csv", false), "at a name boundary, any depth");
        assert!(!e.excludes(b"tree/mysub/a.csv", false));
        assert!(!e.excludes(b"tree/sub/x/a.csv", false), "* stays within a name");
        assert!(e.excludes(b"tree/cache", true));
        assert!(!e.excludes(b"tree/cache", false), "a file named cache stays");
        assert!(e.excludes(b"tree/data/a/b/raw", false));
        assert!(e.excludes(b"tree/data/raw", false));
    }

    #[test]
    fn names_need_not_be_utf8_and_escapes_work() {
        let e = ex(&["bad*", r"lit\*eral"]);
        assert!(e.excludes(b"tree/bad \xff name", false));
        assert!(e.excludes(b"tree/lit*eral", false));
        assert!(!e.excludes(b"tree/litXeral", false));
    }

    #[test]
    fn patterns_that_name_nothing_or_do_not_parse_are_usage_errors() {
        for p in ["", "/", "//", "a[b"] {
            let r = Excludes::new(&[p.to_string()]);
            assert!(matches!(r, Err(FilesError::Usage(_))), "{p:?}: {r:?}");
        }
    }

    #[test]
    fn top_paths_join_the_root_name() {
        assert_eq!(top_path(b"tree", b""), b"tree");
        assert_eq!(top_path(b"tree", b"a/b"), b"tree/a/b");
        assert_eq!(top_path(b"", b"tree/a"), b"tree/a");
    }

    proptest! {
        #[test]
        fn any_pattern_compiles_or_is_refused_and_matching_never_panics(
            p in "[a-z*?/\\[\\]\\\\{},!-]{0,12}",
            path in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            if let Ok(e) = Excludes::new(&[p]) {
                let _ = e.excludes(&path, true);
            }
        }
    }
}
