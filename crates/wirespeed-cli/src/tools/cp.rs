//! `wirespeed cp [-r] [-p] [--resume] [-e SSH] SRC... DST`: copies files and trees between
//! local and remote places. A remote end runs `wirespeed agent` over ssh; data goes straight
//! between the two ends (between two remote hosts when both are remote), never through ssh.
//! Several sources, all local or all on one host, go into DST as a directory in one transfer.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use wirespeed::{Config, Connection, Key};
use wirespeed_files::plane;
use wirespeed_files::{FilesError, Input, Output, Progress, Side, SourceOptions, Summary};

use super::remote::{Agent, Place, RemoteArgs, Ssh, Stderr};
use super::{Common, CopyFlags, dry_run_line, summary_line, with_progress};

/// How long an agent may take to start over ssh.
const AGENT_START: Duration = Duration::from_secs(60);

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

/// Where the sources are: all here, or all on one remote host.
enum Sources {
    Local(Vec<PathBuf>),
    Remote { host: String, paths: Vec<OsString> },
}

impl Sources {
    fn parse(args: &[OsString]) -> anyhow::Result<Sources> {
        let (mut local, mut remote) = (Vec::new(), Vec::new());
        for arg in args {
            match Place::parse(arg) {
                Place::Local(p) => local.push(p),
                Place::Remote { host, path } => remote.push((host, path)),
            }
        }
        match remote.first() {
            None => Ok(Sources::Local(local)),
            Some((host, _)) if local.is_empty() && remote.iter().all(|(h, _)| h == host) => {
                Ok(Sources::Remote { host: host.clone(), paths: remote.into_iter().map(|(_, p)| p).collect() })
            }
            Some(_) => Err(FilesError::Usage("the sources must all be local or all on one host".into()).into()),
        }
    }
}

pub fn run(mut a: CpArgs) -> anyhow::Result<()> {
    a.flags.read_exclude_files()?;
    super::agent::confine_fabric_ports(a.remote.ports(), a.common.transport);
    let ssh = a.remote.ssh()?;
    let source = a.common.source_options(&a.flags)?;
    let (key, key_text) = Key::generate()?;
    let progress = Progress::default();
    let (summary, elapsed) = with_progress(&progress, a.common.verbose, || {
        match (Sources::parse(&a.src)?, Place::parse(&a.dst)) {
            (Sources::Local(srcs), dst) => {
                wirespeed_files::check_roots(&srcs, a.flags.recursive)?;
                let input = Input::paths(srcs);
                match dst {
                    Place::Local(dst) => local_to_local(&a, &input, &source, &dst, &progress),
                    Place::Remote { host, path } => {
                        with_agent(&a, &ssh, &host, "sink", vec![path], &key_text, &key, |conn| {
                            wirespeed_files::send(conn, Side::Client, &input, &source, &progress)
                        })
                    }
                }
            }
            (Sources::Remote { host, paths }, Place::Local(dst)) => {
                with_agent(&a, &ssh, &host, "source", paths, &key_text, &key, |conn| {
                    wirespeed_files::receive(conn, Side::Client, &Output::Path(dst), &sink_options(&a), &progress)
                })
            }
            (Sources::Remote { host: src_host, paths }, Place::Remote { host: dst_host, path: dst }) => {
                // Both ends start at once (ssh start-up is most of a small copy's time); the
                // source learns where the sink listens once the sink says.
                let mut sink =
                    ssh.start(&dst_host, &agent_args(&a, "sink", vec![dst], &[]), &key_text, Stderr::Capture)?;
                let connect = ["--connect".into(), "-".into()];
                let mut source =
                    ssh.start(&src_host, &agent_args(&a, "source", paths, &connect), &key_text, Stderr::Capture)?;
                source.tell(&sink.address(AGENT_START)?)?;
                // No timeout fits a copy of unknown size; the agents time out on their own.
                let done = source.expect("WIRESPEED-DONE", Duration::from_secs(u64::MAX / 4))?;
                let parse = |i: usize| done.get(i).and_then(|w| w.parse().ok()).unwrap_or(0);
                source.finish()?;
                ended(sink)?;
                let [files, bytes, kept, kept_bytes, deleted] = [0, 1, 2, 3, 4].map(parse);
                Ok(Summary { files, bytes, kept, kept_bytes, deleted })
            }
        }
    })?;
    let reused = progress.reused.load(std::sync::atomic::Ordering::Relaxed);
    match a.flags.dry_run {
        true => eprintln!("{}", dry_run_line(&summary)),
        false => eprintln!("{}", summary_line(&summary, reused, elapsed)),
    }
    Ok(())
}

fn sink_options(a: &CpArgs) -> wirespeed_files::SinkOptions {
    a.common.sink_options(&a.flags)
}

/// The agent's command line: role, the flags it needs (and `extra`), then its paths after
/// `--`, so that none is taken for a flag. No key: that goes over stdin.
fn agent_args(a: &CpArgs, role: &str, paths: Vec<OsString>, extra: &[OsString]) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec!["agent".into(), role.into()];
    v.extend(a.common.to_args());
    v.extend(a.flags.to_args());
    v.extend(a.remote.ports_args());
    v.extend_from_slice(extra);
    v.push("--".into());
    v.extend(paths);
    v
}

/// Starts an agent on `host`, connects to it and runs `transfer` over the connection.
#[allow(clippy::too_many_arguments)]
fn with_agent(
    a: &CpArgs,
    ssh: &Ssh,
    host: &str,
    role: &str,
    paths: Vec<OsString>,
    key_text: &str,
    key: &Key,
    transfer: impl FnOnce(&Connection) -> wirespeed_files::Result<Summary>,
) -> anyhow::Result<Summary> {
    let mut agent = ssh.start(host, &agent_args(a, role, paths, &[]), key_text, Stderr::Capture)?;
    let addr = agent.address(AGENT_START)?;
    let conn = plane::connect(&addr, a.common.transport, key, &Config::default())
        .with_context(|| format!("cannot reach the agent on {host} at {addr}"))?;
    let summary = transfer(&conn)?;
    conn.close();
    ended(agent)?;
    Ok(summary)
}

/// Waits for the agent to report its end, then lets it go.
fn ended(mut agent: Agent) -> anyhow::Result<()> {
    agent.expect("WIRESPEED-DONE", AGENT_START)?;
    agent.finish()
}

/// Both ends here: the sink runs on a thread, over shared memory unless told otherwise.
fn local_to_local(
    a: &CpArgs,
    input: &Input,
    source: &SourceOptions,
    dst: &Path,
    progress: &Progress,
) -> anyhow::Result<Summary> {
    let sink = sink_options(a);
    Ok(wirespeed_files::copy_local(input, dst.to_path_buf(), a.common.transport, source, &sink, progress)?)
}
