//! The remote end of `cp`: where a path lives, and the agent started there over ssh. The key
//! goes to the agent through the ssh channel (its standard input), never a command line.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, bail};
use wirespeed_files::Ports;

use super::agent::ITEM;
use crate::exit;

/// A `cp` operand: `[user@]host:path` is remote (as in scp), and so is `[user@][addr]:path`
/// for an IPv6 address; anything with a `/` before its first `:` is local.
#[derive(Debug, PartialEq, Eq)]
pub enum Place {
    Local(PathBuf),
    Remote { host: String, path: OsString },
}

impl Place {
    pub fn parse(arg: &OsStr) -> Place {
        match split_host(arg.as_bytes()) {
            Some((host, path)) => {
                let path = if path.is_empty() { b"." } else { path };
                Place::Remote { host, path: OsString::from_vec(path.to_vec()) }
            }
            None => Place::Local(PathBuf::from(arg)),
        }
    }
}

/// `[user@]host:rest` or `[user@][addr]:rest` as the host (IPv6 brackets dropped, as ssh
/// takes it) and the rest; `None` when nothing before the first `:` could be a host.
pub fn split_host(b: &[u8]) -> Option<(String, &[u8])> {
    let bracket = b
        .iter()
        .position(|c| *c == b'[')
        .filter(|&open| (open == 0 || b[open - 1] == b'@') && !b[..open].iter().any(|c| matches!(c, b'/' | b':')));
    let colon = match bracket {
        Some(open) => b[open..].windows(2).position(|w| w == b"]:").map(|i| open + i + 1),
        None => b.iter().position(|c| *c == b':'),
    }?;
    if colon == 0 || b[..colon].contains(&b'/') {
        return None;
    }
    Some((String::from_utf8_lossy(&b[..colon]).replace(['[', ']'], ""), &b[colon + 1..]))
}

/// How `cp` and `pipe` reach remote hosts.
#[derive(clap::Args, Debug)]
pub struct RemoteArgs {
    /// The ssh command for remote hosts, with any options (it reads ~/.ssh/config as usual).
    #[arg(short = 'e', long = "rsh", default_value = "ssh")]
    ssh: String,
    /// Path of the wirespeed binary on remote hosts.
    #[arg(long, default_value = "wirespeed")]
    remote_bin: String,
    /// Ports the remote ends may listen on, for firewalls that open only some: LO-HI, or one
    /// PORT [default: any free port].
    #[arg(long, value_name = "LO-HI")]
    ports: Option<Ports>,
}

impl RemoteArgs {
    pub fn ports(&self) -> Ports {
        self.ports.unwrap_or(Ports::ANY)
    }

    /// `--ports` for the agents, if given.
    pub fn ports_args(&self) -> Vec<OsString> {
        self.ports.iter().flat_map(|p| ["--ports".into(), p.to_string().into()]).collect()
    }

    pub fn ssh(&self) -> anyhow::Result<Ssh> {
        Ok(Ssh {
            command: shlex::split(&self.ssh).filter(|w| !w.is_empty()).context("cannot parse the -e ssh command")?,
            remote_bin: self.remote_bin.clone(),
        })
    }
}

/// How to reach remote hosts.
pub struct Ssh {
    /// The ssh command and its options, as `-e` gave them.
    pub command: Vec<String>,
    /// The wirespeed binary on the remote host.
    pub remote_bin: String,
}

/// A `wirespeed agent` running on a remote host.
pub struct Agent {
    host: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    /// What it (or ssh) said on standard error, when captured.
    said: Option<JoinHandle<Vec<String>>>,
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

impl Ssh {
    pub fn start(&self, host: &str, args: &[OsString], key: &str, stderr: Stderr) -> anyhow::Result<Agent> {
        let (program, options) = self.command.split_first().context("empty ssh command")?;
        let mut remote = quote(self.remote_bin.as_bytes())?;
        for a in args {
            remote.push(b' ');
            remote.extend_from_slice(&quote(a.as_bytes())?);
        }
        let mut child = Command::new(program)
            .args(options)
            .arg(host)
            .arg(OsString::from_vec(remote))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(if stderr == Stderr::Capture { Stdio::piped() } else { Stdio::inherit() })
            .spawn()
            .with_context(|| format!("cannot run {program}"))?;
        let mut stdin = child.stdin.take().context("no ssh stdin")?;
        stdin.write_all(format!("{key}\n").as_bytes()).with_context(|| format!("ssh to {host} failed"))?;
        stdin.flush()?;
        let stdout = child.stdout.take().context("no ssh stdout")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let said = child.stderr.take().map(|err| {
            std::thread::spawn(move || {
                let mut last = VecDeque::new();
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    if last.len() == SAID_LINES {
                        last.pop_front();
                    }
                    last.push_back(line);
                }
                last.into()
            })
        });
        Ok(Agent { host: host.to_string(), child, stdin: Some(stdin), lines, said })
    }
}

fn quote(b: &[u8]) -> anyhow::Result<Vec<u8>> {
    Ok(shlex::bytes::try_quote(b).context("a path with a NUL byte cannot be passed to ssh")?.into_owned())
}

impl Agent {
    /// Waits for the agent's line starting with `tag`; returns the words after it. A dry
    /// run's lines on the way are listed on our standard output.
    pub fn expect(&mut self, tag: &str, timeout: Duration) -> anyhow::Result<Vec<String>> {
        loop {
            match self.lines.recv_timeout(timeout) {
                Ok(line) if line.starts_with(ITEM) => {
                    let _ = writeln!(std::io::stdout().lock(), "{}", &line[ITEM.len()..]);
                }
                Ok(line) => {
                    let mut words = line.split_whitespace();
                    if words.next() == Some(tag) {
                        return Ok(words.map(str::to_string).collect());
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    bail!("no answer from the agent on {} in {timeout:?}", self.host)
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait()?;
                    return Err(self.failed(status, "ended without answering"));
                }
            }
        }
    }

    /// The address the agent listens on: what it reported, else the ssh host name.
    pub fn address(&mut self, timeout: Duration) -> anyhow::Result<String> {
        let mut all = self.addresses(timeout)?;
        match all.len() {
            1 => Ok(all.remove(0)),
            _ => bail!("garbled agent greeting from {}", self.host),
        }
    }

    /// Every address the agent listens on (`WIRESPEED-AGENT <ip> <port>...`).
    pub fn addresses(&mut self, timeout: Duration) -> anyhow::Result<Vec<String>> {
        let words = self.expect("WIRESPEED-AGENT", timeout)?;
        let Some((ip, ports)) = words.split_first().filter(|(_, p)| !p.is_empty()) else {
            bail!("garbled agent greeting from {}", self.host)
        };
        let host = if ip == "-" { self.host.rsplit('@').next().unwrap_or(&self.host).to_string() } else { ip.clone() };
        let host = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host };
        Ok(ports.iter().map(|port| format!("{host}:{port}")).collect())
    }

    /// Writes one line to the agent's standard input.
    pub fn tell(&mut self, line: &str) -> anyhow::Result<()> {
        let stdin = self.stdin.as_mut().context("the agent's input is closed")?;
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|()| stdin.flush())
            .with_context(|| format!("ssh to {} failed", self.host))
    }

    /// Takes the agent's standard input: dropping it stops the agent if it still runs.
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.stdin.take()
    }

    /// Closes the agent's standard input (it stops if still running), waits for it, and
    /// fails unless it succeeded.
    pub fn finish(mut self) -> anyhow::Result<()> {
        drop(self.stdin.take());
        let status = self.child.wait()?;
        if !status.success() {
            return Err(self.failed(status, "failed"));
        }
        Ok(())
    }

    /// The agent ended with `status`: why, in its own last words when they were captured,
    /// with its exit code (ssh's own failures are connection failures).
    fn failed(&mut self, status: ExitStatus, what: &str) -> anyhow::Error {
        let said = self.said.take().and_then(|t| t.join().ok()).unwrap_or_default();
        let why = said.iter().rev().map(|l| l.trim()).find(|l| !l.is_empty());
        let why = why.map(|l| l.trim_start_matches("wirespeed: error: ").trim_start_matches("wirespeed agent: "));
        let code = match status.code() {
            Some(c @ 1..=6) => c,
            Some(255) | None => exit::CONNECTION,
            Some(_) => exit::FAILURE,
        };
        let host = &self.host;
        let message = match why {
            Some(why) if status.code() == Some(255) => format!("ssh to {host} failed: {why}"),
            Some(why) => format!("the agent on {host} {what}: {why}"),
            None => format!("the agent on {host} {what} ({status})"),
        };
        exit::Coded { code, message }.into()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operands_are_local_unless_they_name_a_host() {
        let r = |h: &str, p: &str| Place::Remote { host: h.into(), path: p.into() };
        assert_eq!(Place::parse(OsStr::new("host:/a b")), r("host", "/a b"));
        assert_eq!(Place::parse(OsStr::new("me@host:")), r("me@host", "."));
        assert_eq!(Place::parse(OsStr::new("./a:b")), Place::Local("./a:b".into()));
        assert_eq!(Place::parse(OsStr::new("/x/y")), Place::Local("/x/y".into()));
        assert_eq!(Place::parse(OsStr::new(":x")), Place::Local(":x".into()));
        assert_eq!(Place::parse(OsStr::new("[::1]:/a:b")), r("::1", "/a:b"));
        assert_eq!(Place::parse(OsStr::new("me@[fe80::1%eth0]:")), r("me@fe80::1%eth0", "."));
        assert_eq!(Place::parse(OsStr::new("./[x]:y")), Place::Local("./[x]:y".into()));
    }
}
