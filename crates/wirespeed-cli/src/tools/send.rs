//! `wirespeed send HOST:PORT [FILE...]`: sends FILE (or standard input) to a waiting `recv`;
//! several go into the receiver's directory.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use wirespeed::Key;
use wirespeed_files::{Input, Progress, Side, fabric_choice};

use super::{Common, CopyFlags, with_progress};

#[derive(Args, Debug)]
pub struct SendArgs {
    /// The receiver's HOST:PORT.
    to: String,
    /// File to send (a directory with -r); standard input when absent. Several go into the
    /// receiver's FILE as a directory, each under its own name.
    files: Vec<PathBuf>,
    /// Send a directory and everything in it.
    #[arg(short, long)]
    recursive: bool,
    /// Read the key from this file instead of WIRESPEED_KEY.
    #[arg(long)]
    key_file: Option<PathBuf>,
    #[command(flatten)]
    common: Common,
}

pub fn run(a: SendArgs) -> anyhow::Result<()> {
    let key = Key::require(a.key_file.as_deref())?;
    let opts = a.common.source_options(&CopyFlags { recursive: a.recursive, ..CopyFlags::default() })?;
    let input = match a.files {
        files if files.is_empty() => Input::stdin(),
        files => {
            wirespeed_files::check_roots(&files, a.recursive)?;
            Input::paths(files)
        }
    };
    let conn = fabric_choice::connect(&a.to, a.common.transport, &key, &a.common.config())
        .with_context(|| format!("cannot reach the receiver at {}", a.to))?;
    let progress = Progress::default();
    with_progress(&progress, a.common.verbose, || {
        Ok(wirespeed_files::send(&conn, Side::Client, &input, &opts, &progress)?)
    })?;
    conn.close();
    Ok(())
}
