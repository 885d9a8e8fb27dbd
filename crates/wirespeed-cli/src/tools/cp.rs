//! `wirespeed cp [-r] [-p] [--resume] [-e SSH] SRC DST`: copies files and trees between
//! local and remote places. A remote end runs `wirespeed agent` over ssh; data goes straight
//! between the two ends (between two remote hosts when both are remote), never through ssh.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use wirespeed::{Config, Connection, Key};
use wirespeed_files::{FilesError, Input, Output, Progress, Server, Side, Summary, plane};

use super::remote::{Agent, Place, RemoteArgs, Ssh, Stderr};
use super::{Common, CopyFlags, summary_line, with_progress};

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
    /// `PATH` or `[user@]host:PATH`.
    src: OsString,
    /// `PATH` or `[user@]host:PATH`.
    dst: OsString,
}

pub fn run(a: CpArgs) -> anyhow::Result<()> {
    super::agent::confine_ucx_ports(a.remote.ports(), a.common.transport);
    let ssh = a.remote.ssh()?;
    let (key, key_text) = Key::generate()?;
    let progress = Progress::default();
    let (summary, elapsed) = with_progress(&progress, a.common.verbose, || {
        match (Place::parse(&a.src), Place::parse(&a.dst)) {
            (Place::Local(src), Place::Local(dst)) => local_to_local(&a, &src, &dst, &key, &progress),
            (Place::Local(src), Place::Remote { host, path }) => {
                wirespeed_files::check_root(&src, a.flags.recursive)?;
                with_agent(&a, &ssh, &host, "sink", path, &key_text, &key, |conn| {
                    wirespeed_files::send(conn, Side::Client, &Input::Path(src), &source_options(&a), &progress)
                })
            }
            (Place::Remote { host, path }, Place::Local(dst)) => {
                with_agent(&a, &ssh, &host, "source", path, &key_text, &key, |conn| {
                    wirespeed_files::receive(conn, Side::Client, &Output::Path(dst), &sink_options(&a), &progress)
                })
            }
            (Place::Remote { host: src_host, path: src }, Place::Remote { host: dst_host, path: dst }) => {
                // Both ends start at once (ssh start-up is most of a small copy's time); the
                // source learns where the sink listens once the sink says.
                let mut sink = ssh.start(&dst_host, &agent_args(&a, "sink", dst), &key_text, Stderr::Capture)?;
                let mut args = agent_args(&a, "source", src);
                args.extend(["--connect".into(), "-".into()]);
                let mut source = ssh.start(&src_host, &args, &key_text, Stderr::Capture)?;
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
    eprintln!("{}", summary_line(&summary, reused, elapsed));
    Ok(())
}

fn source_options(a: &CpArgs) -> wirespeed_files::SourceOptions {
    a.common.source_options(&a.flags)
}

fn sink_options(a: &CpArgs) -> wirespeed_files::SinkOptions {
    a.common.sink_options(&a.flags)
}

/// The agent's command line: role, path and the flags it needs. No key: that goes over stdin.
fn agent_args(a: &CpArgs, role: &str, path: OsString) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec!["agent".into(), role.into(), path];
    v.extend(a.common.to_args());
    v.extend(a.flags.to_args());
    v.extend(a.remote.ports_args());
    v
}

/// Starts an agent on `host`, connects to it and runs `transfer` over the connection.
#[allow(clippy::too_many_arguments)]
fn with_agent(
    a: &CpArgs,
    ssh: &Ssh,
    host: &str,
    role: &str,
    path: OsString,
    key_text: &str,
    key: &Key,
    transfer: impl FnOnce(&Connection) -> wirespeed_files::Result<Summary>,
) -> anyhow::Result<Summary> {
    let mut agent = ssh.start(host, &agent_args(a, role, path), key_text, Stderr::Capture)?;
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
fn local_to_local(a: &CpArgs, src: &Path, dst: &Path, key: &Key, progress: &Progress) -> anyhow::Result<Summary> {
    let server = Server::bind("127.0.0.1:0", a.common.transport, key, &Config::default())?;
    let addr = format!("127.0.0.1:{}", server.port());
    let dst: PathBuf = dst.to_path_buf();
    std::thread::scope(|s| {
        let sink = s.spawn(move || -> anyhow::Result<Summary> {
            let (conn, control) = server.accept(Duration::from_secs(30))?;
            let quiet = Progress::default();
            Ok(wirespeed_files::receive(&conn, Side::Server(control), &Output::Path(dst), &sink_options(a), &quiet)?)
        });
        let conn = plane::connect(&addr, a.common.transport, key, &Config::default())?;
        let sent =
            wirespeed_files::send(&conn, Side::Client, &Input::Path(src.to_path_buf()), &source_options(a), progress);
        drop(conn);
        let received = sink.join().map_err(|_| anyhow::anyhow!("the receiving thread panicked"))?;
        // The end that failed first reports; the other only heard of it from its peer.
        let heard = |e: &anyhow::Error| matches!(e.downcast_ref(), Some(FilesError::Remote { .. }));
        match (received, sent) {
            (Err(r), Err(s)) if heard(&r) => Err(s.into()),
            (received, sent) => received.and(sent.map_err(Into::into)),
        }
    })
}
