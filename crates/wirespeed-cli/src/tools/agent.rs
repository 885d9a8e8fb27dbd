//! `wirespeed agent`: the far end of `cp`, started over ssh. It speaks as
//! [`wirespeed_files::remote`] says, ending with `WIRESPEED-DONE <files> <bytes> <kept files>
//! <kept bytes> <deleted>`. When standard input closes (ssh or the initiator died) it stops at
//! once.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};
use wirespeed::Key;
use wirespeed::fabric::Choice;
use wirespeed_files::remote::{DONE, GREETING, ITEM};
use wirespeed_files::{Input, Output, Ports, Progress, Server, Side, Summary, fabric_choice};

use super::{Common, CopyFlags, list_on_stdout, remote_paths};

/// Set once the transfer is complete, so a closing standard input no longer stops us.
static FINISHED: AtomicBool = AtomicBool::new(false);

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Role {
    Source,
    Sink,
}

#[derive(Args, Debug)]
pub struct AgentArgs {
    role: Role,
    /// The sink's destination, or the source's paths (several go into the sink's directory).
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Connect to this sink instead of listening (remote to remote copies). `-` reads the
    /// address from the line after the key, so that both ends can start at once.
    #[arg(long)]
    connect: Option<String>,
    #[command(flatten)]
    flags: CopyFlags,
    #[command(flatten)]
    common: Common,
    /// Listen on the first free port of this range.
    #[arg(long, default_value = "0")]
    ports: Ports,
}

/// The key, from the first line of standard input.
pub fn read_key() -> anyhow::Result<Key> {
    Ok(Key::new(read_line("key")?.as_bytes())?)
}

/// The next line of standard input, without its end; `what` names it in the error when
/// input ends first.
pub fn read_line(what: &str) -> anyhow::Result<String> {
    let mut line = String::new();
    let n = std::io::stdin().lock().read_line(&mut line).with_context(|| format!("no {what} on standard input"))?;
    anyhow::ensure!(n > 0, "no {what} on standard input");
    Ok(line.trim_end().to_string())
}

/// Standard input stays open for as long as the initiator wants us: once it closes, and
/// unless we already finished, `cleanup` runs and the process exits.
pub fn stop_when_stdin_closes(cleanup: fn()) {
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        if !FINISHED.load(Ordering::SeqCst) {
            cleanup();
            eprintln!("wirespeed agent: the initiator went away; stopping");
            std::process::exit(wirespeed::Class::Connection.exit_code());
        }
    });
}

/// Where to listen: the address the initiator reached us at over ssh, and that address as a
/// host to bind.
pub fn listen_address() -> (Option<String>, String) {
    let ip = std::env::var("SSH_CONNECTION").ok().and_then(|c| c.split_whitespace().nth(2).map(str::to_string));
    let host = match &ip {
        Some(ip) if ip.contains(':') => format!("[{ip}]"),
        Some(ip) => ip.clone(),
        None => "0.0.0.0".to_string(),
    };
    (ip, host)
}

/// Confines the ports UCX's or libfabric's own TCP transport listens on to `ports` as well,
/// unless the environment already says where (`UCX_TCP_PORT_RANGE`, `FI_TCP_PORT_LOW_RANGE`).
/// Call it before any thread starts.
pub fn confine_fabric_ports(ports: Ports, transport: Choice) {
    use wirespeed::{Fabric, Provider};
    let vars: &[(&str, String)] = match transport {
        _ if ports == Ports::ANY => &[],
        Choice::Only(Fabric::Ucx) => &[("UCX_TCP_PORT_RANGE", ports.to_string())],
        Choice::Only(Fabric::Ofi(Provider::Tcp)) => {
            &[("FI_TCP_PORT_LOW_RANGE", ports.first.to_string()), ("FI_TCP_PORT_HIGH_RANGE", ports.last.to_string())]
        }
        _ => &[],
    };
    if vars.iter().any(|(name, _)| std::env::var_os(name).is_some()) {
        return;
    }
    for (name, value) in vars {
        // SAFETY: called first thing in the process's work, while it has one thread.
        unsafe { std::env::set_var(name, value) };
    }
}

/// Marks the work done: from now on a closing standard input is expected.
pub fn finished() {
    FINISHED.store(true, Ordering::SeqCst);
}

pub fn run(mut a: AgentArgs) -> anyhow::Result<()> {
    confine_fabric_ports(a.ports, a.common.transport);
    a.flags.read_exclude_files()?;
    match a.role {
        // Bad sources fail here, in the agent's own words, before anything connects.
        Role::Source => {
            a.paths = remote_paths::sources(a.paths)?;
            wirespeed_files::check_roots(&a.paths, a.flags.recursive)?
        }
        Role::Sink => {
            anyhow::ensure!(a.paths.len() == 1, "a sink writes to one destination");
            a.paths = a.paths.into_iter().map(remote_paths::home).collect::<Result<_, _>>()?;
        }
    }
    let key = read_key()?;
    let connect = match a.connect {
        Some(addr) if addr == "-" => Some(read_line("sink address")?),
        other => other,
    };
    stop_when_stdin_closes(|| {});
    let cfg = a.common.config();
    let (conn, side) = match &connect {
        Some(addr) => (fabric_choice::connect(addr, a.common.transport, &key, &cfg)?, Side::Client),
        None => {
            let (ip, host) = listen_address();
            let server = Server::bind_in(&host, a.ports, a.common.transport, &key, &cfg)?;
            println!("{GREETING} {} {}", ip.as_deref().unwrap_or("-"), server.port());
            std::io::stdout().flush()?;
            let (conn, control) = server.accept(Duration::from_secs(60))?;
            (conn, Side::Server(control))
        }
    };
    let progress = Progress::default();
    let summary = match a.role {
        Role::Sink => {
            let output = Output::Path(a.paths.into_iter().next().unwrap_or_default());
            let mut opts = a.common.sink_options(&a.flags);
            // What a dry run would change goes to the initiator, which lists it.
            opts.dry_run = opts.dry_run.map(|_| list_on_stdout(ITEM));
            wirespeed_files::receive(&conn, side, &output, &opts, &progress)?
        }
        Role::Source => {
            let opts = a.common.source_options(&a.flags)?;
            wirespeed_files::send(&conn, side, &Input::paths(a.paths), &opts, &progress)?
        }
    };
    conn.close();
    finished();
    let Summary { files, bytes, kept, kept_bytes, deleted } = summary;
    println!("{DONE} {files} {bytes} {kept} {kept_bytes} {deleted}");
    std::io::stdout().flush()?;
    Ok(())
}
