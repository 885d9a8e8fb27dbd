//! `wirespeed stage`: one stage of a `pipe`, started over ssh. It reads the key (and, unless
//! it is the last stage, `TO <addr>` of the next stage) from standard input, listens for its
//! input (the last stage also for the link its output leaves by), runs its command between
//! the two links, and reports `WIRESPEED-DONE <status> <cause>`. When standard input closes
//! (the pipeline is torn down) it kills its command's whole process group and exits.

use std::io::Write;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use wirespeed::{Config, Connection, Key};
use wirespeed_files::remote::{DONE, GREETING};
use wirespeed_files::{FilesError, Input, Output, Ports, Progress, Server, Side, fabric_choice};

use super::Common;
use super::agent::{confine_fabric_ports, finished, listen_address, read_key, read_line, stop_when_stdin_closes};
use super::pipe::{Cause, Spec};
use super::remote_paths;
use crate::exit;
use wirespeed::sync::Unpoison;

/// How long a stage waits for its neighbours to connect.
const LINK_WAIT: Duration = Duration::from_secs(60);

/// The process group of the running command, so a teardown can kill all of it.
static GROUP: AtomicI32 = AtomicI32::new(0);

#[derive(Args, Debug)]
pub struct StageArgs {
    /// The last stage: the initiator connects for its output.
    #[arg(long)]
    last: bool,
    #[command(flatten)]
    common: Common,
    /// Listen on the first free ports of this range.
    #[arg(long, default_value = "0")]
    ports: Ports,
    /// `CMD`, `< FILE`, `> FILE` or `>> FILE`.
    spec: String,
}

pub fn run(a: StageArgs) -> anyhow::Result<()> {
    confine_fabric_ports(a.ports, a.common.transport);
    let spec = Spec::parse(&a.spec)?;
    let key = read_key()?;
    let cfg = a.common.config();
    let (ip, host) = listen_address();
    let bind = || Server::bind_in(&host, a.ports, a.common.transport, &key, &cfg);
    let input = bind()?;
    let output = if a.last { Some(bind()?) } else { None };
    let out_port = output.as_ref().map(|o| format!(" {}", o.port())).unwrap_or_default();
    println!("{GREETING} {} {}{out_port}", ip.as_deref().unwrap_or("-"), input.port());
    std::io::stdout().flush()?;
    let next = match &output {
        Some(_) => None,
        None => Some(read_line("next stage")?.strip_prefix("TO ").context("garbled next stage")?.trim().to_string()),
    };
    stop_when_stdin_closes(kill_group);
    let out = match output {
        Some(server) => Out::Accept(Mutex::new(server)),
        None => Out::Connect(next.unwrap_or_default()),
    };
    let stage = Stage { common: &a.common, key: &key, cfg: &cfg, input: Mutex::new(input), output: out };
    let (status, cause, why) = stage.run(&spec);
    finished();
    println!("{DONE} {status} {} {}", cause.as_str(), why.replace('\n', " "));
    std::io::stdout().flush()?;
    Ok(())
}

fn kill_group() {
    let g = GROUP.load(Ordering::SeqCst);
    if g > 0 {
        // SAFETY: kill(2) on a process group we created; no memory is involved.
        unsafe { libc::kill(-g, libc::SIGKILL) };
    }
}

enum Out {
    /// Connect to the next stage here.
    Connect(String),
    /// The last stage: wait for the initiator.
    Accept(Mutex<Server>),
}

struct Stage<'a> {
    common: &'a Common,
    key: &'a Key,
    cfg: &'a Config,
    /// Each listener is used by one thread, but the stage is shared by both.
    input: Mutex<Server>,
    output: Out,
}

/// What went wrong first, so the initiator can tell a cause from its consequences.
#[derive(Default)]
struct First(Mutex<Option<(i32, Cause, String)>>);

impl First {
    fn set(&self, e: &anyhow::Error, cause: Cause) {
        let mut f = self.0.lock().unpoison();
        if f.is_none() {
            *f = Some((exit::code_for(e), cause, format!("{e:#}")));
        }
    }
}

impl Stage<'_> {
    /// Runs the stage; returns its status, what failed first and why.
    fn run(self, spec: &Spec) -> (i32, Cause, String) {
        let first = First::default();
        let never = AtomicBool::new(false);
        let status = match spec {
            Spec::Command(cmd) => self.command(cmd, &first),
            // As in rdpipe, a file stage first takes in all its input (dropping it for `<`),
            // then sends its output (nothing for `>`).
            // A file's `~` is read here, as the remote shell would have read it.
            Spec::ReadFile(path) => {
                let received = self.receive(Output::writer(std::io::sink()), &never);
                match remote_paths::home(path.clone()) {
                    Ok(path) => self.then_send(received, Input::Path(path), &first),
                    Err(e) => first.set(&e.into(), Cause::Output),
                }
                0
            }
            Spec::WriteFile { path, append } => {
                let into =
                    remote_paths::home(path.clone()).map_err(anyhow::Error::from).and_then(|path| match append {
                        true => std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(&path)
                            .map(Output::writer)
                            .with_context(|| format!("cannot open {}", path.display())),
                        // Written under a part name and renamed once complete.
                        false => Ok(Output::Path(path)),
                    });
                let received = into.and_then(|o| self.receive(o, &never));
                self.then_send(received, Input::reader(std::io::empty()), &first);
                0
            }
        };
        match first.0.into_inner().unpoison() {
            Some(failed) => failed,
            None if status != 0 => (status, Cause::Command, format!("exit status {status}")),
            None => (0, Cause::Ok, String::new()),
        }
    }

    /// After a file stage's input: on success, sends `next`. Failures go to `first`.
    fn then_send(&self, received: anyhow::Result<()>, next: Input, first: &First) {
        match received {
            Err(e) => first.set(&e, Cause::Input),
            Ok(()) => {
                if let Err(e) = self.send(next) {
                    first.set(&e, Cause::Output);
                }
            }
        }
    }

    /// Runs `cmd` between the two links; returns its exit status.
    fn command(&self, cmd: &str, first: &First) -> i32 {
        let mut child = match spawn(cmd) {
            Ok(c) => c,
            Err(e) => {
                first.set(&e, Cause::Command);
                return 127;
            }
        };
        let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
        let exited = AtomicBool::new(false);
        let status = std::thread::scope(|s| {
            s.spawn(|| {
                let r = match stdin {
                    Some(w) => self.receive(Output::writer(w), &exited),
                    None => Ok(()),
                };
                // Input the command did not read is no failure (as with `head` in a shell
                // pipeline): it closed its input, or ended.
                if let Err(e) = r
                    && !exited.load(Ordering::SeqCst)
                    && !broken_pipe(&e)
                {
                    first.set(&e, Cause::Input);
                    kill_group();
                }
            });
            s.spawn(|| {
                if let Some(r) = stdout
                    && let Err(e) = self.send(Input::reader(r))
                {
                    first.set(&e, Cause::Output);
                    kill_group();
                }
            });
            let status = child.wait();
            exited.store(true, Ordering::SeqCst);
            status
        });
        match status {
            Ok(s) => s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)),
            Err(_) => 1,
        }
    }

    /// Receives the previous stage's stream into `out`. Gives up waiting for it once `stop`
    /// is set (the command already ended).
    fn receive(&self, out: Output, stop: &AtomicBool) -> anyhow::Result<()> {
        let deadline = Instant::now() + LINK_WAIT;
        let input = self.input.lock().unpoison();
        let (conn, control) = loop {
            match input.accept(Duration::from_millis(200)) {
                Ok(c) => break c,
                Err(FilesError::Connection(wirespeed::Error::Timeout(_)))
                    if !stop.load(Ordering::SeqCst) && Instant::now() < deadline => {}
                Err(e) => return Err(e.into()),
            }
        };
        let quiet = Progress::default();
        let r = linked(&conn, stop, || {
            wirespeed_files::receive(
                &conn,
                Side::Server(control),
                &out,
                &self.common.sink_options(&Default::default()),
                &quiet,
            )
        });
        conn.close();
        r.map(drop)
    }

    /// Sends `input` to the next stage (or, from the last one, to the initiator).
    fn send(&self, input: Input) -> anyhow::Result<()> {
        let opts = self.common.source_options(&Default::default())?;
        let quiet = Progress::default();
        let (conn, side) = match &self.output {
            Out::Connect(addr) => {
                (fabric_choice::connect(addr, self.common.transport, self.key, self.cfg)?, Side::Client)
            }
            Out::Accept(server) => {
                let (conn, control) = server.lock().unpoison().accept(LINK_WAIT)?;
                (conn, Side::Server(control))
            }
        };
        let r = wirespeed_files::send(&conn, side, &input, &opts, &quiet);
        conn.close();
        Ok(r.map(drop)?)
    }
}

/// Runs `transfer` on `conn`, closing the connection (which ends the transfer) if `stop` is
/// set first.
fn linked<T>(
    conn: &Connection,
    stop: &AtomicBool,
    transfer: impl FnOnce() -> wirespeed_files::Result<T>,
) -> anyhow::Result<T> {
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                if stop.load(Ordering::SeqCst) {
                    conn.close();
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let r = transfer();
        done.store(true, Ordering::SeqCst);
        Ok(r?)
    })
}

fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| match c.downcast_ref::<FilesError>() {
        Some(FilesError::Io { error, .. }) => error.kind() == std::io::ErrorKind::BrokenPipe,
        _ => false,
    })
}

/// Starts `cmd` under the user's shell in a process group of its own.
fn spawn(cmd: &str) -> anyhow::Result<Child> {
    let shell = std::env::var("SHELL").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "/bin/sh".into());
    let child = Command::new(&shell)
        .args(["-c", cmd])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0)
        .spawn()
        .with_context(|| format!("cannot run {shell}"))?;
    GROUP.store(child.id() as i32, Ordering::SeqCst);
    Ok(child)
}
