//! An upload to `wirespeed serve`: written batch by batch into a part file of its own, synced
//! and renamed into place when the client finishes, so that concurrent uploads of one name never
//! mix and the last to finish wins whole. Batches that carry application metadata are
//! acknowledged as they are written, echoing it; the summary comes last.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_array::RecordBatch;
use arrow_ipc::writer::{FileWriter, StreamWriter};
use arrow_schema::{ArrowError, SchemaRef};
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use wirespeed_flight::error::Quote;
use wirespeed_flight::{Error, Payload, Result, Upload};

use crate::format::{Format, io_error};
use wirespeed_files::part::PartFile;

pub(crate) struct DirUpload {
    name: String,
    part: PartFile,
    writer: Writer,
    rows: u64,
    _open: Open,
}

/// Counts an upload as in progress while it lives.
struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

enum Writer {
    IpcFile(FileWriter<File>),
    IpcStream(StreamWriter<File>),
    Parquet(Box<ArrowWriter<File>>),
}

impl DirUpload {
    /// Starts writing `name`'s part file, counted in `open` until it is committed or dropped.
    pub(crate) fn start(
        name: &str,
        dest: &Path,
        format: Format,
        schema: &SchemaRef,
        open: &Arc<AtomicUsize>,
    ) -> Result<Self> {
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io_error(name, e))?;
        }
        let (part, file) = PartFile::create_unique(dest).map_err(|e| io_error(name, e))?;
        let bad = |e: &dyn std::fmt::Display| Error::internal(format!("{}: {e}", Quote::str(name)));
        let writer = match format {
            Format::IpcFile => Writer::IpcFile(FileWriter::try_new(file, schema).map_err(|e| bad(&e))?),
            Format::IpcStream => Writer::IpcStream(StreamWriter::try_new(file, schema).map_err(|e| bad(&e))?),
            Format::Parquet => {
                Writer::Parquet(Box::new(ArrowWriter::try_new(file, schema.clone(), None).map_err(|e| bad(&e))?))
            }
        };
        open.fetch_add(1, Ordering::Relaxed);
        Ok(DirUpload { name: name.to_string(), part, writer, rows: 0, _open: Open(open.clone()) })
    }

    fn write_batch(&mut self, batch: &RecordBatch) -> std::result::Result<(), ArrowError> {
        match &mut self.writer {
            Writer::IpcFile(w) => w.write(batch),
            Writer::IpcStream(w) => w.write(batch),
            Writer::Parquet(w) => w.write(batch).map_err(|e| ArrowError::ExternalError(Box::new(e))),
        }
    }
}

impl Upload for DirUpload {
    fn write(&mut self, payload: Payload) -> Result<Option<Bytes>> {
        let (batch, app_metadata) = payload.into_parts();
        if let Some(batch) = &batch {
            self.write_batch(batch).map_err(|e| Error::internal(format!("{}: {e}", self.name)))?;
            self.rows += batch.num_rows() as u64;
        }
        Ok((!app_metadata.is_empty()).then_some(app_metadata))
    }

    fn finish(self: Box<Self>) -> Result<Vec<Bytes>> {
        let DirUpload { name, part, writer, rows, _open } = *self;
        let bad = |e: &dyn std::fmt::Display| Error::internal(format!("{}: {e}", Quote::str(&name)));
        let file = match writer {
            Writer::IpcFile(mut w) => w.finish().and_then(|()| w.into_inner()).map_err(|e| bad(&e))?,
            Writer::IpcStream(mut w) => w.finish().and_then(|()| w.into_inner()).map_err(|e| bad(&e))?,
            Writer::Parquet(w) => w.into_inner().map_err(|e| bad(&e))?,
        };
        part.commit(file).map_err(|e| io_error(&name, e))?;
        Ok(vec![Bytes::from(format!("{{\"path\":{name:?},\"rows\":{rows}}}"))])
    }
}
