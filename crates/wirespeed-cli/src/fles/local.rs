//! `fles run --local I:C`: starts I input and C compute node processes on this host, holds
//! them at a barrier until every connection is up, and merges what they report.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::Value;
use wirespeed::Key;
use wirespeed::key::KEY_ENV;

use super::{RunArgs, report};

pub fn parse_layout(s: &str) -> Result<(usize, usize), String> {
    let (i, c) = s.split_once(':').ok_or("expected INPUTS:COMPUTES, such as 4:4")?;
    let n = |v: &str| v.parse::<usize>().ok().filter(|&n| n > 0).ok_or(format!("{v} is not a count of nodes"));
    Ok((n(i)?, n(c)?))
}

/// A node process and the lines it prints.
struct Node {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
}

/// Lines from every node: (node, line), or (node, None) once it closes its output.
type Lines = Receiver<(usize, Option<String>)>;

struct Nodes {
    nodes: Vec<Node>,
    lines: Lines,
    tx: mpsc::Sender<(usize, Option<String>)>,
}

impl Nodes {
    fn spawn(&mut self, name: String, args: Vec<String>, key: &str) -> Result<usize> {
        let exe = std::env::current_exe()?;
        let mut child = Command::new(exe)
            .args(["fles", "node"])
            .args(&args)
            .env(KEY_ENV, key)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        let index = self.nodes.len();
        let out = BufReader::new(child.stdout.take().expect("piped"));
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            for line in out.lines().map_while(|l| l.ok()) {
                let _ = tx.send((index, Some(line)));
            }
            let _ = tx.send((index, None));
        });
        let stdin = child.stdin.take();
        self.nodes.push(Node { name, child, stdin });
        Ok(index)
    }

    /// The next line from any node before `deadline`, passing over the end of output of
    /// nodes that have `finished`; any other node that closes its output has failed (its
    /// error is on stderr).
    fn next(&mut self, deadline: Instant, finished: &[bool]) -> Result<(usize, String)> {
        loop {
            let wait = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(wait) {
                Ok((i, Some(line))) => return Ok((i, line)),
                Ok((i, None)) if finished.get(i) == Some(&true) => continue,
                Ok((i, None)) => {
                    let status = self.nodes[i].child.wait()?;
                    return Err(anyhow!("{} stopped ({status})", self.nodes[i].name));
                }
                Err(_) => return Err(anyhow!("the nodes did not finish in time")),
            }
        }
    }

    fn kill_all(&mut self) {
        for n in &mut self.nodes {
            let _ = n.child.kill();
            let _ = n.child.wait();
        }
    }
}

pub fn run(layout: (usize, usize), a: &RunArgs) -> Result<()> {
    let (inputs, computes) = layout;
    let s = a.flags.settings(inputs, computes)?;
    let (_, key) = Key::generate()?;
    let (tx, lines) = mpsc::channel();
    let mut nodes = Nodes { nodes: Vec::new(), lines, tx };
    let outcome = drive(layout, a, &mut nodes, &key, s.timeout);
    if outcome.is_err() {
        nodes.kill_all();
    }
    let summaries = outcome?;
    for n in &mut nodes.nodes {
        let status = n.child.wait()?;
        if !status.success() {
            bail!("{} ended with {status}", n.name);
        }
    }
    report::publish(&a.flags, inputs, computes, &summaries, a.report.as_deref())
}

/// Starts the nodes, passes the barrier, and collects their summaries.
fn drive(layout: (usize, usize), a: &RunArgs, nodes: &mut Nodes, key: &str, timeout: Duration) -> Result<Vec<Value>> {
    let (inputs, computes) = layout;
    let common = |role: &str, index: usize| {
        let mut v = vec![
            format!("--role={role}"),
            format!("--index={index}"),
            format!("--inputs={inputs}"),
            format!("--computes={computes}"),
        ];
        v.extend(a.flags.to_args());
        v
    };
    for c in 0..computes {
        let mut args = common("compute", c);
        args.push(format!("--output={}", a.output.for_compute(c, computes)));
        nodes.spawn(format!("compute node {c}"), args, key)?;
    }
    let mut urls = vec![String::new(); computes];
    let setup_end = Instant::now() + timeout;
    while urls.iter().any(|u| u.is_empty()) {
        let (i, line) = nodes.next(setup_end, &[])?;
        match line.strip_prefix("listening ") {
            Some(url) => urls[i] = url.to_string(),
            None => bail!("compute node {i} said {line:?}"),
        }
    }
    for i in 0..inputs {
        let mut args = common("input", i);
        args.push(format!("--connect={}", urls.join(",")));
        nodes.spawn(format!("input {i}"), args, key)?;
    }
    let mut ready = 0;
    while ready < inputs + computes {
        match nodes.next(setup_end, &[])? {
            (_, l) if l == "ready" => ready += 1,
            (i, l) => bail!("{} said {l:?}", nodes.nodes[i].name),
        }
    }
    for n in &mut nodes.nodes {
        let stdin = n.stdin.as_mut().expect("piped");
        writeln!(stdin, "go").with_context(|| format!("starting {}", n.name))?;
    }
    // Every node reports once it is done; the run as a whole may take long, but no node
    // stays silent past its own timeout without failing.
    let mut summaries = Vec::new();
    let mut finished = vec![false; inputs + computes];
    while summaries.len() < inputs + computes {
        let (i, line) = nodes.next(Instant::now() + timeout * 4, &finished)?;
        let name = &nodes.nodes[i].name;
        match line.strip_prefix("summary ") {
            Some(json) => summaries.push(serde_json::from_str(json).with_context(|| format!("{name}'s summary"))?),
            None => bail!("{name} said {line:?}"),
        }
        finished[i] = true;
    }
    Ok(summaries)
}
