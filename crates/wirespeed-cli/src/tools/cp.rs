//! `wirespeed cp [-r] [-p] [--resume] [-e SSH] SRC... DST`: copies files and trees between
//! local and remote places ([`wirespeed_files::remote`] does the work).

use std::ffi::OsString;

use clap::Args;
use wirespeed_files::Progress;
use wirespeed_files::remote::{self, RemoteCopy};

use super::remote::RemoteArgs;
use super::{Common, CopyFlags, dry_run_line, summary_line, with_progress};

#[derive(Args, Debug)]
pub struct CpArgs {
    #[command(flatten)]
    flags: CopyFlags,
    #[command(flatten)]
    remote: RemoteArgs,
    #[command(flatten)]
    common: Common,
    /// `PATH` or `[user@]host:PATH`; several (all local, or all on one host) go into DST,
    /// which is made a directory if it does not exist.
    #[arg(required = true)]
    src: Vec<OsString>,
    /// `PATH` or `[user@]host:PATH`.
    dst: OsString,
}

pub fn run(mut a: CpArgs) -> anyhow::Result<()> {
    a.flags.read_exclude_files()?;
    super::agent::confine_fabric_ports(a.remote.ports(), a.common.transport);
    let config = a.common.config();
    let how = RemoteCopy {
        ssh: &a.remote.ssh(&config)?,
        transport: a.common.transport,
        config: &config,
        source: &a.common.source_options(&a.flags)?,
        sink: &a.common.sink_options(&a.flags),
        agent_extra: a.remote.ports_args(),
    };
    let progress = Progress::default();
    let (summary, elapsed) =
        with_progress(&progress, a.common.verbose, || Ok(remote::copy(&a.src, &a.dst, &how, &progress)?))?;
    let reused = progress.reused.load(std::sync::atomic::Ordering::Relaxed);
    match a.flags.dry_run {
        true => eprintln!("{}", dry_run_line(&summary)),
        false => eprintln!("{}", summary_line(&summary, reused, elapsed)),
    }
    Ok(())
}
