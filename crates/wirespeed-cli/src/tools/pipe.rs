//! `wirespeed pipe HOST:'CMD' HOST:'CMD' …`: multi-host pipelines (the rdpipe equivalent).
//! Standard input feeds the first stage; each stage's output goes straight to the next
//! host; the last stage's output comes back to standard output. Every stage listens on an
//! ephemeral port, so a host may appear any number of times. If a stage fails, every stage
//! is torn down and the pipeline exits with the failing stage's status.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ChildStdin;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;
use wirespeed::Key;
use wirespeed_files::remote::{AGENT_START, DONE, Stderr, option_args, split_host};
use wirespeed_files::{FilesError, Input, Output, Progress, Side, SinkOptions, fabric_choice};

use super::Common;
use super::remote::RemoteArgs;
use crate::exit;

/// After the first failure, how long the other stages get to report theirs, so the cause
/// is told apart from its consequences.
const GRACE: Duration = Duration::from_secs(2);

#[derive(Args, Debug)]
pub struct PipeArgs {
    #[command(flatten)]
    remote: RemoteArgs,
    #[command(flatten)]
    common: Common,
    /// `[user@]host:CMD`, or `host:'< FILE'` (send a file), `host:'> FILE'` (write one) or
    /// `host:'>> FILE'` (append to one).
    #[arg(required = true, value_name = "HOST:CMD")]
    stages: Vec<String>,
}

/// What one stage does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spec {
    /// A shell command between the previous stage and the next.
    Command(String),
    /// `< FILE`: drop the input, then send the file.
    ReadFile(PathBuf),
    /// `> FILE` or `>> FILE`: write the input to the file, then send nothing.
    WriteFile { path: PathBuf, append: bool },
}

impl Spec {
    pub fn parse(s: &str) -> anyhow::Result<Spec> {
        let t = s.trim();
        let file = |rest: &str| -> anyhow::Result<PathBuf> {
            let p = rest.trim();
            if p.is_empty() {
                bail!("{t:?} names no file");
            }
            Ok(PathBuf::from(p))
        };
        Ok(if let Some(rest) = t.strip_prefix(">>") {
            Spec::WriteFile { path: file(rest)?, append: true }
        } else if let Some(rest) = t.strip_prefix('>') {
            Spec::WriteFile { path: file(rest)?, append: false }
        } else if let Some(rest) = t.strip_prefix('<') {
            Spec::ReadFile(file(rest)?)
        } else if t.is_empty() {
            bail!("an empty stage command");
        } else {
            Spec::Command(s.to_string())
        })
    }
}

/// What a stage reports went wrong first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    Ok,
    /// The command failed (or could not start).
    Command,
    /// The link from the previous stage failed.
    Input,
    /// The link to the next stage failed; no failure of this stage's own if the next one
    /// ended well (it stopped reading, as `head` does).
    Output,
}

impl Cause {
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Ok => "ok",
            Cause::Command => "command",
            Cause::Input => "input",
            Cause::Output => "output",
        }
    }

    fn parse(s: &str) -> Option<Cause> {
        [Cause::Ok, Cause::Command, Cause::Input, Cause::Output].into_iter().find(|c| c.as_str() == s)
    }
}

/// How one stage ended, as the initiator saw it.
#[derive(Clone, Debug)]
enum Ended {
    Stage {
        status: i32,
        cause: Cause,
        why: String,
    },
    /// Its ssh session ended without a report.
    Lost(String),
}

enum Event {
    Stage(usize, Ended),
    /// The last stage's output, written to standard output.
    Drained(Result<(), String>),
}

pub fn run(a: PipeArgs) -> anyhow::Result<()> {
    super::agent::confine_fabric_ports(a.remote.ports(), a.common.transport);
    let mut stages = Vec::new();
    for s in &a.stages {
        let Some((host, spec)) = split_host(s.as_bytes()) else {
            bail!(FilesError::Usage(format!("{s:?} is not HOST:CMD")));
        };
        let spec = String::from_utf8_lossy(spec).into_owned();
        Spec::parse(&spec).map_err(|e| FilesError::Usage(format!("{s:?}: {e}")))?;
        stages.push((host, spec));
    }
    let ssh = a.remote.ssh(&a.common.config())?;
    let opts = a.common.source_options(&Default::default())?;
    let (key, key_text) = Key::generate()?;
    let last = stages.len() - 1;
    // Every stage starts at once: ssh start-up is most of a short pipeline's time.
    let mut agents = Vec::new();
    for (i, (host, spec)) in stages.iter().enumerate() {
        let mut args = vec!["stage".into()];
        if i == last {
            args.push("--last".into());
        }
        args.extend(option_args(&opts, &SinkOptions::default(), a.common.transport, &a.common.config()));
        args.extend(a.remote.ports_args());
        args.extend(["--".into(), spec.into()]);
        agents.push(ssh.start(host, &args, &key_text, Stderr::Inherit)?);
    }
    let mut addrs = Vec::new();
    for agent in &mut agents {
        addrs.push(agent.addresses(AGENT_START)?);
    }
    for i in 0..last {
        agents[i].tell(&format!("TO {}", addrs[i + 1][0]))?;
    }
    let (Some(first_in), Some(last_out)) = (addrs[0].first().cloned(), addrs[last].get(1).cloned()) else {
        bail!("the last stage did not report where its output leaves");
    };
    let hang_ups: Vec<Option<ChildStdin>> = agents.iter_mut().map(|a| a.take_stdin()).collect();

    let (tx, events) = mpsc::channel();
    let mut watchers = Vec::new();
    for (i, mut agent) in agents.into_iter().enumerate() {
        let tx = tx.clone();
        watchers.push(std::thread::spawn(move || {
            let ended = match agent.expect(DONE, Duration::from_secs(u64::MAX / 4)) {
                Ok(words) => parse_done(&words),
                Err(e) => Ended::Lost(format!("{e:#}")),
            };
            let _ = tx.send(Event::Stage(i, ended));
            // Dropping the agent waits for its ssh to end.
        }));
    }
    let common = a.common.clone();
    let feed_key = key.clone();
    std::thread::spawn(move || {
        // A terminal is not data: the first stage then starts with nothing on its input.
        let input = if std::io::stdin().is_terminal() { Input::reader(std::io::empty()) } else { Input::stdin() };
        let quiet = Progress::default();
        // The first stage may end without reading its input; its own report tells.
        if let Ok(conn) = fabric_choice::connect(&first_in, common.transport, &feed_key, &common.config()) {
            let _ = wirespeed_files::send(&conn, Side::Client, &input, &opts, &quiet);
            conn.close();
        }
    });
    let common = a.common.clone();
    std::thread::spawn(move || {
        let quiet = Progress::default();
        let r = fabric_choice::connect(&last_out, common.transport, &key, &common.config()).and_then(|conn| {
            let r = wirespeed_files::receive(
                &conn,
                Side::Client,
                &Output::stdout(),
                &common.sink_options(&Default::default()),
                &quiet,
            );
            conn.close();
            r
        });
        let _ = tx.send(Event::Drained(r.map(drop).map_err(|e| drained_error(&e))));
    });

    let mut ended: Vec<Option<Ended>> = vec![None; stages.len()];
    let mut drained: Option<Result<(), String>> = None;
    let mut order = Vec::new();
    let mut deadline: Option<Instant> = None;
    while ended.iter().any(Option::is_none) || drained.is_none() {
        let wait = deadline.map_or(Duration::from_secs(3600), |d| d.saturating_duration_since(Instant::now()));
        match events.recv_timeout(wait) {
            Ok(Event::Stage(i, e)) => {
                if !matches!(e, Ended::Stage { cause: Cause::Ok | Cause::Output, .. }) {
                    deadline.get_or_insert(Instant::now() + GRACE);
                }
                order.push(i);
                ended[i] = Some(e);
            }
            Ok(Event::Drained(r)) => {
                if r.is_err() {
                    deadline.get_or_insert(Instant::now() + GRACE);
                }
                drained = Some(r);
            }
            Err(mpsc::RecvTimeoutError::Timeout) if deadline.is_some_and(|d| Instant::now() >= d) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    // Tear down whatever still runs: each stage kills its command's process group when its
    // standard input closes.
    drop(hang_ups);
    for w in watchers {
        let _ = w.join();
    }
    match verdict(&ended, &drained, &order) {
        None => Ok(()),
        Some((i, code, why)) => {
            let (host, spec) = &stages[i];
            Err(exit::Coded { code, message: format!("stage {} ({host}:{spec:?}) failed: {why}", i + 1) }.into())
        }
    }
}

fn parse_done(words: &[String]) -> Ended {
    let status = words.first().and_then(|w| w.parse().ok());
    let cause = words.get(1).and_then(|w| Cause::parse(w));
    match (status, cause) {
        (Some(status), Some(cause)) => Ended::Stage { status, cause, why: words[2..].join(" ") },
        _ => Ended::Lost(format!("a garbled report: {}", words.join(" "))),
    }
}

/// Standard output closing early (`| head`) is no failure; anything else is.
fn drained_error(e: &FilesError) -> String {
    match e {
        FilesError::Io { error, .. } if error.kind() == std::io::ErrorKind::BrokenPipe => String::new(),
        e => e.to_string(),
    }
}

/// Which stage failed, with its exit status and why; `None` if the pipeline succeeded.
/// Failures a stage only suffered from its neighbours are passed over for their cause: a
/// command's own failure first, then a stage that vanished, then failed links, each in the
/// order they were reported. A stage whose output link failed after the next stage ended
/// well was only cut short, as `yes` is by `head`.
fn verdict(
    ended: &[Option<Ended>],
    drained: &Option<Result<(), String>>,
    order: &[usize],
) -> Option<(usize, i32, String)> {
    let next_ok = |i: usize| match ended.get(i + 1) {
        Some(next) => matches!(next, Some(Ended::Stage { cause: Cause::Ok, .. })),
        None => matches!(drained, Some(Ok(()))) || matches!(drained, Some(Err(e)) if e.is_empty()),
    };
    let failure = |i: usize| -> Option<(u8, i32, String)> {
        match ended[i].as_ref()? {
            Ended::Stage { cause: Cause::Ok, .. } => None,
            Ended::Stage { cause: Cause::Output, .. } if next_ok(i) => None,
            Ended::Stage { status, cause, why } => {
                let rank = if *cause == Cause::Command { 0 } else { 2 };
                Some((rank, if *status == 0 { 1 } else { *status }, why.clone()))
            }
            Ended::Lost(why) => Some((1, 255, why.clone())),
        }
    };
    let found =
        order.iter().filter_map(|&i| failure(i).map(|(rank, code, why)| (rank, i, code, why))).min_by_key(|f| f.0);
    if let Some((_, i, code, why)) = found {
        return Some((i, code, why));
    }
    // Stages that never reported were torn down for another's failure, or the output failed.
    let last = ended.len() - 1;
    if let Some(i) = ended.iter().position(Option::is_none) {
        return Some((i, 255, "did not finish".into()));
    }
    match drained {
        Some(Err(e)) if !e.is_empty() => Some((last, 1, format!("its output did not arrive: {e}"))),
        _ => None,
    }
}
