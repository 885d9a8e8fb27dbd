//! `wirespeed recv [--listen HOST:PORT] [FILE]`: waits for one `send`, writes its data to
//! FILE (or into it, if it is a directory) or to standard output.

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use anyhow::Context;

use clap::Args;
use wirespeed::Key;
use wirespeed_files::{Output, Progress, Server, Side};

use super::{Common, with_progress};

#[derive(Args, Debug)]
pub struct RecvArgs {
    /// Where to listen; port 0 picks a free one.
    #[arg(long, default_value = "0.0.0.0:7470")]
    listen: String,
    /// Read the key from this file instead of WIRESPEED_KEY; with neither, one is generated
    /// and printed.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// How long to wait for the sender, in seconds.
    #[arg(long, default_value_t = 600)]
    wait: u64,
    #[command(flatten)]
    common: Common,
    /// Output file or directory (made if missing when named with a trailing slash, `out/`);
    /// standard output when absent.
    file: Option<PathBuf>,
}

pub fn run(a: RecvArgs) -> anyhow::Result<()> {
    let key = match Key::from_env_or_file(a.key_file.as_deref())? {
        Some(k) => k,
        None => {
            let (k, text) = Key::generate()?;
            eprintln!("wirespeed: key {text} (give it to the sender as WIRESPEED_KEY)");
            k
        }
    };
    // A trailing slash names a directory: made if missing, as rsync makes it, before anyone
    // waits on a transfer that could not land.
    if let Some(dir) = a.file.as_ref().filter(|f| f.as_os_str().as_bytes().ends_with(b"/")) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot make the directory {}", dir.display()))?;
    }
    // Its errors name the address already.
    let server = Server::bind(&a.listen, a.common.transport, &key, &a.common.config())?;
    let host = a.listen.rsplit_once(':').map(|(h, _)| h).unwrap_or("0.0.0.0");
    eprintln!("wirespeed: listening on {host}:{}", server.port());
    let (conn, control) = server.accept(std::time::Duration::from_secs(a.wait))?;
    let output = a.file.map(Output::Path).unwrap_or_else(Output::stdout);
    let progress = Progress::default();
    with_progress(&progress, a.common.verbose, || {
        Ok(wirespeed_files::receive(
            &conn,
            Side::Server(control),
            &output,
            &a.common.sink_options(&Default::default()),
            &progress,
        )?)
    })?;
    conn.close();
    Ok(())
}
