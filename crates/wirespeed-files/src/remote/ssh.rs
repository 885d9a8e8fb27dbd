//! Agents: `wirespeed agent` started on a remote host over ssh. The key goes to the agent
//! through the ssh channel (its standard input), never a command line; the agent answers in
//! lines on its standard output (see [`super`]).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::ITEM;
use crate::{FilesError, Report, Result};

/// An agent's exit status when its ssh failed, and the CLI's code for a connection failure.
const SSH_FAILED: i32 = 255;
const CONNECTION: i32 = 4;

/// How to reach remote hosts.
#[derive(Clone, Debug)]
pub struct Ssh {
    /// The ssh command and its options.
    pub command: Vec<String>,
    /// The wirespeed binary on the remote host.
    pub remote_bin: String,
    /// How long a silent host is waited for: OpenSSH's keepalive gives up on it after this,
    /// and an ssh that does not end this long after its agent was let go is killed.
    pub peer_timeout: Duration,
}

impl Ssh {
    /// `command` as a shell would split it (`ssh -p 2222 -i id`); it reads ~/.ssh/config as
    /// usual.
    pub fn new(command: &str, remote_bin: &str, peer_timeout: Duration) -> Result<Ssh> {
        match shlex::split(command).filter(|w| !w.is_empty()) {
            Some(command) => Ok(Ssh { command, remote_bin: remote_bin.to_string(), peer_timeout }),
            None => Err(FilesError::Usage(format!("cannot parse the ssh command {command:?}"))),
        }
    }

    /// Runs `remote_bin args...` on `host` and gives it `key` on its standard input.
    pub fn start(&self, host: &str, args: &[OsString], key: &str, stderr: Stderr) -> Result<Agent> {
        let (program, options) = self.command.split_first().ok_or(FilesError::Usage("empty ssh command".into()))?;
        let mut remote = quote(self.remote_bin.as_bytes())?;
        for a in args {
            remote.push(b' ');
            remote.extend_from_slice(&quote(a.as_bytes())?);
        }
        let mut child = Command::new(program)
            .args(options)
            .args(self.keepalive())
            .arg(host)
            .arg(std::ffi::OsStr::from_bytes(&remote))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(if stderr == Stderr::Capture { Stdio::piped() } else { Stdio::inherit() })
            .spawn()
            .map_err(|e| FilesError::io(Path::new(program), e))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(FilesError::Internal("ssh without pipes"));
        };
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(std::result::Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let said = child.stderr.take().map(|err| {
            std::thread::spawn(move || {
                let mut last = VecDeque::new();
                for line in BufReader::new(err).lines().map_while(std::result::Result::ok) {
                    if last.len() == SAID_LINES {
                        last.pop_front();
                    }
                    last.push_back(line);
                }
                last.into()
            })
        });
        let mut agent = Agent {
            host: host.to_string(),
            child,
            stdin: Some(stdin),
            lines,
            said,
            items: None,
            peer_timeout: self.peer_timeout,
        };
        agent.tell(key)?;
        Ok(agent)
    }
}

impl Ssh {
    /// For OpenSSH, keepalive that ends the session once the host has been silent for the
    /// peer timeout: without it, ssh waits on a host whose link went down for as long as TCP
    /// retries (a quarter of an hour). Options on the command line come first and win.
    fn keepalive(&self) -> Vec<String> {
        let openssh = Path::new(&self.command[0]).file_name().is_some_and(|n| n == "ssh");
        let every = (self.peer_timeout.as_secs() / KEEPALIVE_PROBES as u64).max(1);
        match openssh {
            true => vec![
                "-o".into(),
                format!("ServerAliveInterval={every}"),
                "-o".into(),
                format!("ServerAliveCountMax={KEEPALIVE_PROBES}"),
            ],
            false => Vec::new(),
        }
    }
}

/// Keepalive probes an unanswered ssh sends before it gives up.
const KEEPALIVE_PROBES: u32 = 3;

fn quote(b: &[u8]) -> Result<Vec<u8>> {
    match shlex::bytes::try_quote(b) {
        Ok(q) => Ok(q.into_owned()),
        Err(_) => Err(FilesError::Usage("a path with a NUL byte cannot be passed to ssh".into())),
    }
}

/// Where an agent's standard error goes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Stderr {
    /// To ours: a pipeline stage's command speaks to the user.
    Inherit,
    /// Kept, so that a failure is one line in the agent's own words.
    Capture,
}

/// Lines of an agent's standard error kept for its failure: the last few say why.
const SAID_LINES: usize = 8;

/// A `wirespeed agent` running on a remote host.
pub struct Agent {
    host: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    /// What it (or ssh) said on standard error, when captured.
    said: Option<JoinHandle<Vec<String>>>,
    /// Where a dry run's lines go.
    items: Option<Report>,
    peer_timeout: Duration,
}

impl Agent {
    /// Sends the lines of a sink's dry run (what it would change) to `report`.
    pub fn report_items(&mut self, report: Option<Report>) {
        self.items = report;
    }

    /// Waits for the agent's line starting with `tag`; returns the words after it.
    pub fn expect(&mut self, tag: &str, timeout: Duration) -> Result<Vec<String>> {
        loop {
            match self.lines.recv_timeout(timeout) {
                Ok(line) if line.starts_with(ITEM) => {
                    if let Some(Report(report)) = &self.items {
                        report(&line[ITEM.len()..]);
                    }
                }
                Ok(line) => {
                    let mut words = line.split_whitespace();
                    if words.next() == Some(tag) {
                        return Ok(words.map(str::to_string).collect());
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    return Err(self.lost(format!("no answer from the agent on {} in {timeout:?}", self.host)));
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.wait()?;
                    return Err(self.failed(status, "ended without answering"));
                }
            }
        }
    }

    /// The address the agent listens on: what it reported, else the ssh host name.
    pub fn address(&mut self, timeout: Duration) -> Result<String> {
        let mut all = self.addresses(timeout)?;
        match all.len() {
            1 => Ok(all.remove(0)),
            _ => Err(self.lost(format!("garbled agent greeting from {}", self.host))),
        }
    }

    /// Every address the agent listens on (`WIRESPEED-AGENT <ip> <port>...`).
    pub fn addresses(&mut self, timeout: Duration) -> Result<Vec<String>> {
        let words = self.expect(super::GREETING, timeout)?;
        let Some((ip, ports)) = words.split_first().filter(|(_, p)| !p.is_empty()) else {
            return Err(self.lost(format!("garbled agent greeting from {}", self.host)));
        };
        let host = if ip == "-" { self.host.rsplit('@').next().unwrap_or(&self.host).to_string() } else { ip.clone() };
        let host = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host };
        Ok(ports.iter().map(|port| format!("{host}:{port}")).collect())
    }

    /// Writes one line to the agent's standard input.
    pub fn tell(&mut self, line: &str) -> Result<()> {
        let Some(stdin) = self.stdin.as_mut() else {
            return Err(FilesError::Internal("the agent's input is closed"));
        };
        let written = stdin.write_all(format!("{line}\n").as_bytes()).and_then(|()| stdin.flush());
        written.map_err(|e| self.lost(format!("ssh to {} failed: {e}", self.host)))
    }

    /// Takes the agent's standard input: dropping it stops the agent if it still runs.
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.stdin.take()
    }

    /// Closes the agent's standard input (it stops if still running), waits for it, and
    /// fails unless it succeeded.
    pub fn finish(mut self) -> Result<()> {
        drop(self.stdin.take());
        let status = self.wait()?;
        match status.success() {
            true => Ok(()),
            false => Err(self.failed(status, "failed")),
        }
    }

    /// Waits for ssh to end, for at most the peer timeout: then it is killed, for its host has
    /// gone silent.
    fn wait(&mut self) -> Result<ExitStatus> {
        let io = |e| FilesError::io(Path::new("ssh"), e);
        let deadline = Instant::now() + self.peer_timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().map_err(io)? {
                return Ok(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        self.child.wait().map_err(io)?;
        Err(self.lost(format!("ssh to {} did not end within {:?} of its agent's end", self.host, self.peer_timeout)))
    }

    /// A failure to reach the agent.
    fn lost(&self, message: String) -> FilesError {
        FilesError::Agent { exit: CONNECTION, message }
    }

    /// The agent ended with `status`: why, in its own last words when they were captured,
    /// with its exit code (ssh's own failures are connection failures).
    fn failed(&mut self, status: ExitStatus, what: &str) -> FilesError {
        let said = self.said.take().and_then(|t| t.join().ok()).unwrap_or_default();
        let why = said.iter().rev().map(|l| l.trim()).find(|l| !l.is_empty());
        let why = why.map(|l| l.trim_start_matches("wirespeed: error: ").trim_start_matches("wirespeed agent: "));
        let exit = match status.code() {
            Some(c @ 1..=6) => c,
            Some(SSH_FAILED) | None => CONNECTION,
            Some(_) => 1,
        };
        let host = &self.host;
        let message = match why {
            Some(why) if status.code() == Some(SSH_FAILED) => format!("ssh to {host} failed: {why}"),
            Some(why) => format!("the agent on {host} {what}: {why}"),
            None => format!("the agent on {host} {what} ({status})"),
        };
        FilesError::Agent { exit, message }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.wait();
    }
}
