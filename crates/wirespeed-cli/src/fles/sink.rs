//! Where a compute node puts complete timeslices: nowhere (after checking every CRC), a
//! FLESnet archive or an Arrow IPC file, or to FLESnet's consumers over shared memory. Files are written under a hidden name and renamed
//! into place only once the run ends well, so a half-written file never looks complete.
//! Each timeslice reaches the OS before the node gives its space back, so a node that dies
//! leaves in its part file every timeslice it finished (the others rebuild the rest).

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use wirespeed_fles::FlesError;
use wirespeed_fles::output::{ArrowWriter, StoredTimeslice, TsaWriter};
use wirespeed_fles::run::{ShmOutput, Timeslice};

/// FLESnet's timeslice flag for a timeslice that lacks components (TsFlag::MissingComponents).
const MISSING_COMPONENTS: u32 = 1 << 2;

/// The `--output` flag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    Null,
    Tsa(PathBuf),
    Arrow(PathBuf),
    /// FLESnet's consumer interface.
    Shm(ShmOutput),
}

/// How long a consumer may hold a timeslice unless `shm:NAME?hold=SECONDS` says otherwise.
const DEFAULT_HOLD: Duration = Duration::from_secs(10);

/// `NAME`, then `?hold=SECONDS` and `&consumers=N` in any order.
fn parse_shm(spec: &str) -> Result<Output, String> {
    let (name, options) = spec.split_once('?').unwrap_or((spec, ""));
    if name.is_empty() || name.contains('/') {
        return Err(format!("{name:?}: shm:NAME takes a plain name"));
    }
    let mut shm = ShmOutput { name: name.into(), hold: DEFAULT_HOLD, consumers: 0 };
    for option in options.split('&').filter(|o| !o.is_empty()) {
        match option.split_once('=') {
            Some(("hold", secs)) => {
                let secs: f64 = secs.parse().map_err(|_| format!("{secs}: hold is a number of seconds"))?;
                shm.hold = Duration::try_from_secs_f64(secs).map_err(|_| format!("{secs}: not a usable hold"))?;
            }
            Some(("consumers", n)) => shm.consumers = n.parse().map_err(|_| format!("{n}: consumers is a count"))?,
            _ => return Err(format!("{option}: shm:NAME takes hold=SECONDS and consumers=N")),
        }
    }
    Ok(Output::Shm(shm))
}

impl FromStr for Output {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once(':') {
            None if s == "null" => Ok(Output::Null),
            Some(("tsa", path)) if !path.is_empty() => Ok(Output::Tsa(path.into())),
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
            Output::Tsa(p) => write!(f, "tsa:{}", p.display()),
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
            Output::Tsa(p) => Output::Tsa(numbered(p)),
            Output::Arrow(p) => Output::Arrow(numbered(p)),
            Output::Shm(s) if computes > 1 => Output::Shm(ShmOutput { name: format!("{}.{c}", s.name), ..s.clone() }),
            shm @ Output::Shm(_) => shm.clone(),
        }
    }
}

enum Writer {
    Tsa(TsaWriter<BufWriter<File>>),
    Arrow(Box<ArrowWriter<BufWriter<File>>>),
}

/// A file being written under `.NAME.part`, and the name it gets at the end.
struct Pending {
    writer: Writer,
    part: PathBuf,
    path: PathBuf,
}

/// A compute node's output.
pub struct Sink {
    file: Option<Pending>,
    core: u64,
}

impl Sink {
    /// Opens `output` for timeslices of `core` core microslices.
    pub fn open(output: &Output, core: u64) -> Result<Sink, FlesError> {
        let path = match output {
            Output::Null | Output::Shm(_) => return Ok(Sink { file: None, core }),
            Output::Tsa(p) | Output::Arrow(p) => p,
        };
        let name = path.file_name().ok_or_else(|| FlesError::Archive(format!("{} names no file", path.display())))?;
        let part = path.with_file_name(format!(".{}.part", name.to_string_lossy()));
        let io = |e: std::io::Error| FlesError::Archive(format!("{}: {e}", part.display()));
        let file = BufWriter::new(File::create(&part).map_err(io)?);
        let writer = match output {
            Output::Tsa(_) => {
                let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
                let user = std::env::var("USER").unwrap_or_default();
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as i64);
                Writer::Tsa(TsaWriter::new(file, now, host.trim(), &user).map_err(io)?)
            }
            _ => Writer::Arrow(Box::new(ArrowWriter::new(file)?)),
        };
        Ok(Sink { file: Some(Pending { writer, part, path: path.clone() }), core })
    }

    /// Checks every microslice's CRC, then writes the timeslice.
    pub fn write(&mut self, ts: &Timeslice<'_>) -> Result<u64, FlesError> {
        let mut checked = 0;
        for (&i, c) in ts.inputs.iter().zip(&ts.components) {
            c.verify(i as u16)?;
            checked += c.len() as u64;
        }
        let Some(file) = &mut self.file else { return Ok(checked) };
        match &mut file.writer {
            Writer::Tsa(w) => {
                let start_time = ts.components.first().and_then(|c| c.descriptor(0).ok()).map_or(0, |d| d.idx);
                let stored = StoredTimeslice {
                    index: ts.index,
                    start_time,
                    duration: 0,
                    flags: if ts.incomplete() { MISSING_COMPONENTS } else { 0 },
                    ts_pos: 0,
                    num_core_microslices: self.core as u32,
                    components: ts.components.iter().map(|c| (c.bytes(), c.len() as u64)).collect(),
                };
                let io = |e: std::io::Error| FlesError::Archive(format!("{}: {e}", file.part.display()));
                w.write(&stored).map_err(io)?;
                w.flush().map_err(io)?;
            }
            Writer::Arrow(w) => w.write(ts.index, &ts.components, &ts.inputs, ts.incomplete())?,
        }
        Ok(checked)
    }

    /// Flushes the file to disk and renames it into place.
    pub fn finish(self) -> Result<(), FlesError> {
        let Some(file) = self.file else { return Ok(()) };
        let io = |e: std::io::Error| FlesError::Archive(format!("{}: {e}", file.part.display()));
        let buffered = match file.writer {
            Writer::Tsa(w) => w.finish().map_err(io)?,
            Writer::Arrow(w) => w.finish()?,
        };
        let f = buffered.into_inner().map_err(|e| io(e.into_error()))?;
        f.sync_all().map_err(io)?;
        std::fs::rename(&file.part, &file.path).map_err(io)
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
        assert_eq!("tsa:run.tsa".parse::<Output>().unwrap().for_compute(1, 1), Output::Tsa("run.tsa".into()));
        assert_eq!("tsa:run".parse::<Output>().unwrap().for_compute(3, 4), Output::Tsa("run.3".into()));
        for bad in ["tsa:", "parquet:x", "nul"] {
            assert!(bad.parse::<Output>().is_err(), "{bad}");
        }
    }
}
