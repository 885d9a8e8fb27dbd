//! Where a compute node puts complete timeslices: nowhere (after checking every CRC), FLESnet
//! archives (one file or a sequence, maybe zstd-compressed) or an Arrow IPC file. Files are
//! written under a hidden name and renamed into place only once whole (a sequence's file once
//! it holds its count, the last when the run ends well), so a half-written file never looks
//! complete. Each timeslice reaches the OS before the node gives its space back, so a node
//! that dies leaves in its part file every timeslice it finished (the others rebuild the rest).

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use wirespeed_fles::FlesError;
use wirespeed_fles::model::{Slicing, TimesliceDescriptor, timeslice_flags};
use wirespeed_fles::output::{ArrowWriter, StoredTimeslice, TsaWriter};
use wirespeed_fles::run::Timeslice;

use super::args::Verify;
use super::output::{Output, TsaOutput};

enum Writer {
    Tsa(TsaWriter<BufWriter<File>>),
    Arrow(Box<ArrowWriter<BufWriter<File>>>),
}

/// A file being written under `.NAME.part`, and the name it gets at the end.
struct Pending {
    writer: Writer,
    part: PathBuf,
    path: PathBuf,
    /// Timeslices in it.
    held: u64,
}

/// A compute node's output.
pub struct Sink {
    output: Output,
    file: Option<Pending>,
    /// Files of the output begun so far.
    files: usize,
    slicing: Slicing,
    verify: Verify,
}

fn archive_error(path: &Path) -> impl Fn(std::io::Error) -> FlesError + '_ {
    move |e| FlesError::Io { what: format!("writing {}", path.display()), source: std::sync::Arc::new(e) }
}

impl Sink {
    /// Opens `output` for timeslices cut as `slicing` says, checked as `verify` says.
    pub fn open(output: &Output, slicing: Slicing, verify: Verify) -> Result<Sink, FlesError> {
        let mut sink = Sink { output: output.clone(), file: None, files: 0, slicing, verify };
        if matches!(output, Output::Tsa(_) | Output::Arrow(_)) {
            sink.begin_file()?;
        }
        Ok(sink)
    }

    /// Starts the output's next file.
    fn begin_file(&mut self) -> Result<(), FlesError> {
        let path = match &self.output {
            Output::Tsa(t) => t.file(self.files),
            Output::Arrow(p) => p.clone(),
            Output::Null | Output::Shm(_) => return Ok(()),
        };
        let name = path.file_name().ok_or_else(|| FlesError::Config(format!("{} names no file", path.display())))?;
        let part = path.with_file_name(format!(".{}.part", name.to_string_lossy()));
        let io = archive_error(&part);
        let file = BufWriter::new(File::create(&part).map_err(&io)?);
        let writer = match &self.output {
            Output::Tsa(TsaOutput { zstd, .. }) => {
                let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
                let user = std::env::var("USER").unwrap_or_default();
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as i64);
                let writer = match zstd {
                    None => TsaWriter::new(file, now, host.trim(), &user),
                    Some(level) => TsaWriter::compressed(file, now, host.trim(), &user, *level),
                };
                Writer::Tsa(writer.map_err(&io)?)
            }
            _ => Writer::Arrow(Box::new(ArrowWriter::new(file)?)),
        };
        drop(io);
        self.files += 1;
        self.file = Some(Pending { writer, part, path, held: 0 });
        Ok(())
    }

    /// Checks the microslices' CRCs (as `verify` says), then writes the timeslice; gives how
    /// many it checked.
    pub fn write(&mut self, ts: &Timeslice<'_>) -> Result<u64, FlesError> {
        let mut checked = 0;
        if self.verify.checks(ts.index) {
            for (&i, c) in ts.inputs.iter().zip(&ts.components) {
                c.verify(i as u16)?;
                checked += c.len() as u64;
            }
        }
        let per_file = match &self.output {
            Output::Tsa(t) => t.per_file,
            _ => None,
        };
        if per_file.is_some_and(|n| self.file.as_ref().is_some_and(|f| f.held >= n)) {
            self.finish_file()?;
            self.begin_file()?;
        }
        let Some(file) = &mut self.file else { return Ok(checked) };
        match &mut file.writer {
            Writer::Tsa(w) => {
                let (start_time, duration) = self.slicing.start_and_duration(ts.index);
                let descriptor = TimesliceDescriptor {
                    index: ts.index,
                    start_time,
                    duration,
                    flags: timeslice_flags(&ts.components, ts.incomplete()),
                    num_core_microslices: self.slicing.core as u32,
                    ..Default::default()
                };
                let components = ts.components.iter().map(|c| (c.bytes(), c.len() as u64)).collect();
                let stored = StoredTimeslice { descriptor, components };
                let io = archive_error(&file.part);
                w.write(&stored).map_err(&io)?;
                w.flush().map_err(&io)?;
            }
            Writer::Arrow(w) => w.write(ts.index, &ts.components, &ts.inputs, ts.incomplete())?,
        }
        file.held += 1;
        Ok(checked)
    }

    /// Flushes the current file to disk and renames it into place.
    fn finish_file(&mut self) -> Result<(), FlesError> {
        let Some(file) = self.file.take() else { return Ok(()) };
        let io = archive_error(&file.part);
        let buffered = match file.writer {
            Writer::Tsa(w) => w.finish().map_err(&io)?,
            Writer::Arrow(w) => w.finish()?,
        };
        let f = buffered.into_inner().map_err(|e| io(e.into_error()))?;
        f.sync_all().map_err(&io)?;
        std::fs::rename(&file.part, &file.path).map_err(&io)
    }

    /// Ends the output: its last file goes into place.
    pub fn finish(mut self) -> Result<(), FlesError> {
        self.finish_file()
    }
}
