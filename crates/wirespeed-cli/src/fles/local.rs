//! `fles run --local I:C`: starts I input and C compute node processes on this host, holds
//! them at a barrier until every connection is up, and merges what they report.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;
use wirespeed::Key;
use wirespeed::key::KEY_ENV;
use wirespeed_fles::monitor::{Monitor, Point};
use wirespeed_fles::run::Settings;

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

    /// The next line from any node within `wait` (None if there is none yet), passing over
    /// the end of output of nodes that have `finished`. Any other node that closes its output
    /// has failed (its error is on stderr): an error, unless the run can `lose` nodes (it is
    /// under way), when that comes back as a line of None.
    fn next(&mut self, wait: Duration, finished: &[bool], lose: bool) -> Result<Option<(usize, Option<String>)>> {
        let deadline = Instant::now() + wait;
        loop {
            match self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok((i, Some(line))) => return Ok(Some((i, Some(line)))),
                Ok((i, None)) if finished.get(i) == Some(&true) => continue,
                Ok((i, None)) if lose => return Ok(Some((i, None))),
                Ok((i, None)) => {
                    let status = self.nodes[i].child.wait()?;
                    return Err(anyhow!("{} stopped ({status})", self.nodes[i].name));
                }
                Err(_) => return Ok(None),
            }
        }
    }

    /// The next line before `deadline`, or an error.
    fn next_before(&mut self, deadline: Instant) -> Result<(usize, String)> {
        match self.next(deadline.saturating_duration_since(Instant::now()), &[], false)? {
            Some((i, Some(line))) => Ok((i, line)),
            _ => Err(anyhow!("the nodes did not get ready in time")),
        }
    }

    /// Asks every node to wind the run down.
    fn stop_all(&self) {
        for n in &self.nodes {
            let _ = kill(Pid::from_raw(n.child.id() as i32), Signal::SIGUSR1);
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
    let stop = Arc::new(AtomicBool::new(false));
    crate::interrupt::install_winding_down(stop.clone())?;
    let s = a.flags.settings(inputs, computes, stop)?;
    a.flags.frame_settings(&s)?; // flags that do not fit together, before any node starts
    let (_, key) = Key::generate()?;
    let (tx, lines) = mpsc::channel();
    let mut nodes = Nodes { nodes: Vec::new(), lines, tx };
    // The nodes print their points; this process sends them on, so that one endpoint or
    // database connection serves the run.
    let monitor = (!a.monitor.is_empty()).then(|| Monitor::open(&a.monitor)).transpose()?;
    let outcome = drive(layout, a, &mut nodes, &key, &s, monitor.as_ref());
    monitor.iter().for_each(Monitor::close);
    if outcome.is_err() {
        nodes.kill_all();
    }
    let (summaries, lost) = outcome?;
    for (i, n) in nodes.nodes.iter_mut().enumerate() {
        let status = n.child.wait()?;
        if !status.success() && !lost.contains(&i) {
            bail!("{} ended with {status}", n.name);
        }
    }
    report::publish(&report::build(a.flags.describe(inputs, computes), &summaries), a.report.as_deref())
}

/// Starts the nodes, passes the barrier, and collects their summaries.
/// The summaries, and the nodes lost on the way (inputs the run went on without).
fn drive(
    layout: (usize, usize),
    a: &RunArgs,
    nodes: &mut Nodes,
    key: &str,
    s: &Settings,
    monitor: Option<&Monitor>,
) -> Result<(Vec<Value>, Vec<usize>)> {
    let timeout = s.timeout;
    let (inputs, computes) = layout;
    let common = |role: &str, index: usize| {
        let mut v = vec![
            format!("--role={role}"),
            format!("--index={index}"),
            format!("--inputs={inputs}"),
            format!("--computes={computes}"),
        ];
        v.extend(a.flags.to_args());
        if monitor.is_some() {
            v.push("--metrics".into());
        }
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
        let (i, line) = nodes.next_before(setup_end)?;
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
        match nodes.next_before(setup_end)? {
            (_, l) if l == "ready" => ready += 1,
            (i, l) => bail!("{} said {l:?}", nodes.nodes[i].name),
        }
    }
    for n in &mut nodes.nodes {
        let stdin = n.stdin.as_mut().expect("piped");
        writeln!(stdin, "go").with_context(|| format!("starting {}", n.name))?;
    }
    // Every node reports once it is done; the run as a whole may take long, but no node
    // stays silent past its own timeout without failing. Compute nodes tell their progress.
    let mut summaries = Vec::new();
    let mut finished = vec![false; inputs + computes];
    // The run goes on without a node that dies: an input's timeslices are delivered
    // incomplete, a compute node's go to the others.
    let mut lost = Vec::new();
    let (mut computes_done, mut inputs_done): (Option<Instant>, Option<Instant>) = (None, None);
    let mut progress = Progress::new(computes);
    let mut stopping = false;
    let mut quiet_since = Instant::now();
    while summaries.len() + lost.len() < inputs + computes {
        if !stopping && s.stop.load(Ordering::Relaxed) {
            nodes.stop_all();
            stopping = true;
        }
        // Once every node on one side is done, a node on the other still running past the
        // timeout is hung (its peers gave up on it): it is stopped and counted lost.
        let n = inputs + computes;
        for (side, others, since) in
            [(computes..n, 0..computes, &mut computes_done), (0..computes, computes..n, &mut inputs_done)]
        {
            if since.is_none() && finished[others].iter().all(|&f| f) {
                *since = Some(Instant::now());
            }
            if since.is_some_and(|at| at.elapsed() > timeout) {
                for i in side {
                    if !finished[i] {
                        let node = &mut nodes.nodes[i];
                        eprintln!("wirespeed: {} did not end after the others did; stopping it", node.name);
                        let _ = node.child.kill();
                        finished[i] = true;
                        lost.push(i);
                    }
                }
            }
        }
        let Some((i, line)) = nodes.next(Duration::from_millis(100), &finished, true)? else {
            if quiet_since.elapsed() > timeout * 4 {
                bail!("no node said anything for {:?}", timeout * 4);
            }
            continue;
        };
        quiet_since = Instant::now();
        let name = &nodes.nodes[i].name;
        let Some(line) = line else {
            eprintln!("wirespeed: {name} was lost; the run goes on without it");
            finished[i] = true;
            lost.push(i);
            continue;
        };
        if let Some(point) = line.strip_prefix("metrics ") {
            let point = Point::from_line(point).with_context(|| format!("{name}'s metrics"))?;
            if let Some(m) = monitor {
                m.record(vec![point]);
            }
        } else if let Some(p) = line.strip_prefix("progress ") {
            progress.update(i, p);
        } else if let Some(json) = line.strip_prefix("summary ") {
            summaries.push(serde_json::from_str(json).with_context(|| format!("{name}'s summary"))?);
            finished[i] = true;
        } else {
            bail!("{name} said {line:?}");
        }
    }
    progress.bar.finish_and_clear();
    // Compute nodes were started first.
    if lost.iter().filter(|&&i| i < computes).count() == computes {
        bail!("every compute node was lost");
    }
    Ok((summaries, lost))
}

/// The live line on a terminal: every compute node's timeslices and bytes so far.
struct Progress {
    bar: indicatif::ProgressBar,
    nodes: Vec<(u64, u64)>,
    start: Instant,
}

impl Progress {
    fn new(computes: usize) -> Self {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_style(indicatif::ProgressStyle::with_template("{spinner} {msg}").expect("a valid template"));
        Progress { bar, nodes: vec![(0, 0); computes], start: Instant::now() }
    }

    /// `line` from compute node `c` (nodes are numbered computes first): "TIMESLICES BYTES".
    fn update(&mut self, c: usize, line: &str) {
        let mut v = line.split(' ').filter_map(|x| x.parse::<u64>().ok());
        if let (Some(t), Some(b), Some(slot)) = (v.next(), v.next(), self.nodes.get_mut(c)) {
            *slot = (t, b);
        }
        let (t, b) = self.nodes.iter().fold((0, 0), |acc, n| (acc.0 + n.0, acc.1 + n.1));
        let secs = self.start.elapsed().as_secs_f64();
        self.bar.set_message(format!(
            "{t} timeslices, {:.2} GB/s over {secs:.0} s (Ctrl-C finishes the timeslices begun)",
            b as f64 / secs.max(1e-9) / 1e9
        ));
        self.bar.tick();
    }
}
