//! The `--output` flag: where a compute node puts complete timeslices, and each node's own
//! share of it.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use wirespeed_fles::run::ShmOutput;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    Null,
    Tsa(TsaOutput),
    Arrow(PathBuf),
    /// FLESnet's consumer interface.
    Shm(ShmOutput),
}

/// FLESnet timeslice archives: one file, or a sequence of files of `per_file` timeslices each,
/// named by the path with `%n` replaced by 0000, 0001, ... (`.%n` appended if it has none, as
/// FLESnet's OutputArchiveSequence does); zstd-compressed at `zstd`'s level if given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TsaOutput {
    pub path: PathBuf,
    pub zstd: Option<i32>,
    pub per_file: Option<u64>,
}

/// How long a consumer may hold a timeslice unless `shm:NAME?hold=SECONDS` says otherwise.
const DEFAULT_HOLD: Duration = Duration::from_secs(10);

/// `PATH?OPTION&OPTION...` split into the path and its options as (name, value) pairs.
fn options(spec: &str) -> (&str, Vec<(&str, Option<&str>)>) {
    let (path, options) = spec.split_once('?').unwrap_or((spec, ""));
    let pairs = options.split('&').filter(|o| !o.is_empty()).map(|o| match o.split_once('=') {
        Some((name, value)) => (name, Some(value)),
        None => (o, None),
    });
    (path, pairs.collect())
}

/// `NAME`, then `?hold=SECONDS` and `&consumers=N` in any order.
fn parse_shm(spec: &str) -> Result<Output, String> {
    let (name, options) = options(spec);
    if name.is_empty() || name.contains('/') {
        return Err(format!("{name:?}: shm:NAME takes a plain name"));
    }
    let mut shm = ShmOutput { name: name.into(), hold: DEFAULT_HOLD, consumers: 0 };
    for option in options {
        match option {
            ("hold", Some(secs)) => {
                let secs: f64 = secs.parse().map_err(|_| format!("{secs}: hold is a number of seconds"))?;
                shm.hold = Duration::try_from_secs_f64(secs).map_err(|_| format!("{secs}: not a usable hold"))?;
            }
            ("consumers", Some(n)) => shm.consumers = n.parse().map_err(|_| format!("{n}: consumers is a count"))?,
            (name, _) => return Err(format!("{name}: shm:NAME takes hold=SECONDS and consumers=N")),
        }
    }
    Ok(Output::Shm(shm))
}

/// `PATH`, then `?zstd[=LEVEL]` and `&per-file=N` in any order.
fn parse_tsa(spec: &str) -> Result<Output, String> {
    let (path, options) = options(spec);
    if path.is_empty() {
        return Err("tsa: takes a path".into());
    }
    let mut tsa = TsaOutput { path: path.into(), zstd: None, per_file: None };
    for option in options {
        match option {
            ("zstd", level) => {
                let level = level.map_or(Ok(1), str::parse).map_err(|_| format!("{level:?}: zstd takes a level"))?;
                if !zstd::compression_level_range().contains(&level) {
                    return Err(format!("zstd={level}: levels go from 1 to 22"));
                }
                tsa.zstd = Some(level);
            }
            ("per-file", Some(n)) => match n.parse() {
                Ok(n) if n > 0 => tsa.per_file = Some(n),
                _ => return Err(format!("per-file={n}: a count of timeslices, at least 1")),
            },
            (name, _) => return Err(format!("{name}: tsa:PATH takes zstd[=LEVEL] and per-file=N")),
        }
    }
    Ok(Output::Tsa(tsa))
}

impl FromStr for Output {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once(':') {
            None if s == "null" => Ok(Output::Null),
            Some(("tsa", spec)) => parse_tsa(spec),
            Some(("arrow", path)) if !path.is_empty() => Ok(Output::Arrow(path.into())),
            Some(("shm", spec)) => parse_shm(spec),
            _ => Err(format!("{s}: expected null, tsa:PATH, arrow:PATH or shm:NAME")),
        }
    }
}

impl std::fmt::Display for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Output::Null => f.write_str("null"),
            Output::Tsa(t) => {
                let mut options = Vec::new();
                options.extend(t.zstd.map(|l| format!("zstd={l}")));
                options.extend(t.per_file.map(|n| format!("per-file={n}")));
                let options = if options.is_empty() { String::new() } else { format!("?{}", options.join("&")) };
                write!(f, "tsa:{}{options}", t.path.display())
            }
            Output::Arrow(p) => write!(f, "arrow:{}", p.display()),
            Output::Shm(s) => write!(f, "shm:{}?hold={}&consumers={}", s.name, s.hold.as_secs_f64(), s.consumers),
        }
    }
}

impl Output {
    /// Compute node `c`'s own file: the path itself with one compute node, else the path
    /// with the node's number before the extension (run.tsa: run.0.tsa, run.1.tsa, ...);
    /// likewise its shared memory's name (NAME.0, NAME.1, ...).
    pub fn for_compute(&self, c: usize, computes: usize) -> Output {
        let numbered = |path: &Path| {
            if computes == 1 {
                return path.to_path_buf();
            }
            let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            match path.extension() {
                Some(ext) => path.with_file_name(format!("{stem}.{c}.{}", ext.to_string_lossy())),
                None => path.with_file_name(format!("{stem}.{c}")),
            }
        };
        match self {
            Output::Null => Output::Null,
            Output::Tsa(t) => Output::Tsa(TsaOutput { path: numbered(&t.path), ..t.clone() }),
            Output::Arrow(p) => Output::Arrow(numbered(p)),
            Output::Shm(s) if computes > 1 => Output::Shm(ShmOutput { name: format!("{}.{c}", s.name), ..s.clone() }),
            shm @ Output::Shm(_) => shm.clone(),
        }
    }
}

impl TsaOutput {
    /// The name of file `n` of the output (its one file, if it is no sequence).
    pub fn file(&self, n: usize) -> PathBuf {
        if self.per_file.is_none() {
            return self.path.clone();
        }
        let mut template = self.path.to_string_lossy().into_owned();
        if !template.contains("%n") {
            template.push_str(".%n");
        }
        template.replace("%n", &format!("{n:04}")).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_parse_and_number_per_compute_node() {
        assert_eq!("null".parse(), Ok(Output::Null));
        let shm = |name: &str, secs, consumers| {
            Output::Shm(ShmOutput { name: name.into(), hold: Duration::from_secs(secs), consumers })
        };
        assert_eq!("shm:fles_out".parse(), Ok(shm("fles_out", 10, 0)));
        assert_eq!("shm:a?consumers=2&hold=2".parse::<Output>().unwrap().for_compute(1, 2), shm("a.1", 2, 2));
        assert_eq!(shm("a", 2, 1).to_string(), "shm:a?hold=2&consumers=1");
        for bad in ["shm:", "shm:a/b", "shm:a?hold=x", "shm:a?hold=-1", "shm:a?wait=1"] {
            assert!(bad.parse::<Output>().is_err(), "{bad}");
        }
        assert_eq!(
            "arrow:/x/run.arrow".parse::<Output>().unwrap().for_compute(1, 2),
            Output::Arrow("/x/run.1.arrow".into())
        );
        let tsa = |path: &str, zstd, per_file| Output::Tsa(TsaOutput { path: path.into(), zstd, per_file });
        assert_eq!("tsa:run.tsa".parse::<Output>().unwrap().for_compute(1, 1), tsa("run.tsa", None, None));
        assert_eq!("tsa:run".parse::<Output>().unwrap().for_compute(3, 4), tsa("run.3", None, None));
        let seq = "tsa:run_%n.tsa?zstd&per-file=100".parse::<Output>().unwrap();
        assert_eq!(seq, tsa("run_%n.tsa", Some(1), Some(100)));
        assert_eq!(seq.to_string(), "tsa:run_%n.tsa?zstd=1&per-file=100");
        assert_eq!("tsa:r.tsa?zstd=19".parse(), Ok(tsa("r.tsa", Some(19), None)));
        for bad in ["tsa:", "parquet:x", "nul", "tsa:x?zstd=99", "tsa:x?per-file=0", "tsa:x?gzip"] {
            assert!(bad.parse::<Output>().is_err(), "{bad}");
        }
    }

    #[test]
    fn sequences_are_numbered_as_flesnet_numbers_them() {
        let t = TsaOutput { path: "/d/run_%n.tsa".into(), zstd: None, per_file: Some(10) };
        assert_eq!(t.file(3), PathBuf::from("/d/run_0003.tsa"));
        let t = TsaOutput { path: "run.tsa".into(), ..t };
        assert_eq!(t.file(12), PathBuf::from("run.tsa.0012"));
        assert_eq!(TsaOutput { per_file: None, ..t }.file(5), PathBuf::from("run.tsa"));
    }
}
