//! `cp` between any two places: here, or on other hosts through agents.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::time::Duration;

use wirespeed::fabric::Choice;
use wirespeed::{Config, Connection, Key};

use super::{Agent, DONE, Place, Ssh, Stderr};
use crate::fabric_choice;
use crate::{FilesError, Input, Output, Progress, Result, Side, SinkOptions, SourceOptions, Summary};

/// How long an agent may take to start over ssh.
pub const AGENT_START: Duration = Duration::from_secs(60);

/// What a copy asks of both ends, and how it reaches other hosts.
pub struct RemoteCopy<'a> {
    /// How to start the far end.
    pub ssh: &'a Ssh,
    /// Which fabric the data takes.
    pub transport: Choice,
    /// The connections' settings here; agents get its peer timeout.
    pub config: &'a Config,
    /// What the source is asked to do.
    pub source: &'a SourceOptions,
    /// A dry run's lines, from a sink here or an agent, go to its `dry_run` report.
    pub sink: &'a SinkOptions,
    /// More arguments for every agent (`--ports`).
    pub agent_extra: Vec<OsString>,
}

/// Where the sources are: all here, or all on one remote host.
enum Sources {
    Local(Vec<PathBuf>),
    Remote { host: String, paths: Vec<OsString> },
}

impl Sources {
    fn parse(args: &[OsString]) -> Result<Sources> {
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
            Some(_) => Err(FilesError::Usage("the sources must all be local or all on one host".into())),
        }
    }
}

/// Copies `sources` (each `PATH` or `[user@]host:PATH`; all local, or all on one host) to
/// `dst`. Several sources go into `dst` as a directory in one transfer.
pub fn copy(sources: &[OsString], dst: &OsStr, how: &RemoteCopy<'_>, progress: &Progress) -> Result<Summary> {
    let (key, key_text) = Key::generate()?;
    let (sink, source) = (how.sink, how.source);
    match (Sources::parse(sources)?, Place::parse(dst)) {
        (Sources::Local(srcs), dst) => {
            crate::check_roots(&srcs, source.recursive)?;
            let input = Input::paths(srcs);
            match dst {
                Place::Local(dst) => crate::copy_local(&input, dst, how.transport, source, sink, progress),
                Place::Remote { host, path } => with_agent(how, &host, "sink", vec![path], (&key, &key_text), |conn| {
                    crate::send(conn, Side::Client, &input, source, progress)
                }),
            }
        }
        (Sources::Remote { host, paths }, Place::Local(dst)) => {
            with_agent(how, &host, "source", paths, (&key, &key_text), |conn| {
                crate::receive(conn, Side::Client, &Output::Path(dst), sink, progress)
            })
        }
        (Sources::Remote { host: src_host, paths }, Place::Remote { host: dst_host, path: dst }) => {
            // Both ends start at once (ssh start-up is most of a small copy's time); the
            // source learns where the sink listens once the sink says.
            let ssh = how.ssh;
            let mut sink =
                ssh.start(&dst_host, &agent_args(how, "sink", vec![dst], &[]), &key_text, Stderr::Capture)?;
            sink.report_items(how.sink.dry_run.clone());
            let connect = ["--connect".into(), "-".into()];
            let mut source =
                ssh.start(&src_host, &agent_args(how, "source", paths, &connect), &key_text, Stderr::Capture)?;
            source.tell(&sink.address(AGENT_START)?)?;
            // No timeout fits a copy of unknown size; the agents time out on their own.
            let done = source.expect(DONE, Duration::from_secs(u64::MAX / 4))?;
            let parse = |i: usize| done.get(i).and_then(|w| w.parse().ok()).unwrap_or(0);
            source.finish()?;
            ended(sink)?;
            let [files, bytes, kept, kept_bytes, deleted] = [0, 1, 2, 3, 4].map(parse);
            Ok(Summary { files, bytes, kept, kept_bytes, deleted })
        }
    }
}

/// The options of a transfer as an agent's flags, spelled as the CLI spells them.
pub fn option_args(source: &SourceOptions, sink: &SinkOptions, transport: Choice, config: &Config) -> Vec<OsString> {
    let on = [
        (source.recursive, "--recursive"),
        (source.preserve, "--preserve"),
        (source.resume, "--resume"),
        (source.sync, "--sync"),
        (source.no_clobber, "--no-clobber"),
        (source.delete || sink.delete, "--delete"),
        (source.dry_run || sink.dry_run.is_some(), "--dry-run"),
        (source.encrypt || sink.encrypt, "--encrypt"),
        (source.direct || sink.direct, "--direct"),
    ];
    let mut v: Vec<OsString> = vec!["--transport".into(), transport.to_string().into()];
    v.extend(["--peer-timeout".into(), config.peer_timeout.as_secs().max(1).to_string().into()]);
    v.extend(on.iter().filter(|(on, _)| *on).map(|(_, flag)| flag.into()));
    for p in source.exclude.patterns() {
        v.extend(["--exclude".into(), p.into()]);
    }
    if let Some(n) = source.streams {
        v.extend(["--streams".into(), n.to_string().into()]);
    }
    if let Some(rate) = source.rate_limit {
        v.extend(["--bwlimit".into(), (rate as f64 / 1e6).to_string().into()]);
    }
    if let Some(level) = source.compress {
        v.extend(["--compress".into(), format!("zstd:{level}").into()]);
    }
    v
}

/// The agent's command line: role, the flags it needs (and `extra`), then its paths after
/// `--`, so that none is taken for a flag. No key: that goes over stdin.
fn agent_args(how: &RemoteCopy<'_>, role: &str, paths: Vec<OsString>, extra: &[OsString]) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec!["agent".into(), role.into()];
    v.extend(option_args(how.source, how.sink, how.transport, how.config));
    v.extend_from_slice(&how.agent_extra);
    v.extend_from_slice(extra);
    v.push("--".into());
    v.extend(paths);
    v
}

/// Starts an agent on `host`, connects to it and runs `transfer` over the connection.
fn with_agent(
    how: &RemoteCopy<'_>,
    host: &str,
    role: &str,
    paths: Vec<OsString>,
    (key, key_text): (&Key, &str),
    transfer: impl FnOnce(&Connection) -> Result<Summary>,
) -> Result<Summary> {
    let mut agent = how.ssh.start(host, &agent_args(how, role, paths, &[]), key_text, Stderr::Capture)?;
    agent.report_items(how.sink.dry_run.clone());
    let addr = agent.address(AGENT_START)?;
    let conn = fabric_choice::connect(&addr, how.transport, key, how.config)
        .map_err(|error| FilesError::Unreachable { host: host.to_string(), addr, error: Box::new(error) })?;
    let summary = transfer(&conn)?;
    conn.close();
    ended(agent)?;
    Ok(summary)
}

/// Waits for the agent to report its end, then lets it go.
fn ended(mut agent: Agent) -> Result<()> {
    agent.expect(DONE, AGENT_START)?;
    agent.finish()
}
