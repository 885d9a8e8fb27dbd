//! `bench raw`: a receiver process on loopback, N messages of SIZE bytes over S streams,
//! one thread on each side serving every stream. With `--op put|get`, N one-sided transfers
//! of SIZE bytes into or out of a region the receiver exposes instead; with `--op pingpong`,
//! N round trips of one SIZE-byte message that the receiver sends back, each latency half a
//! round trip, as fi_pingpong and ucx_perftest count it.
//! One message in `LATENCY_EVERY` carries its send time (CLOCK_MONOTONIC, shared by both
//! processes; the others carry 0, warm-up too); the receiver notes when each such message
//! arrived whole and sends the latencies back at the end.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use wirespeed::fabric::AddressKind;
use wirespeed::{Config, Connection, Fabric, Key, Ready, key::KEY_ENV};

use super::report::Report;

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Op {
    /// Messages on streams.
    Send,
    /// One-sided writes into the receiver's region (each complete at the receiver).
    Put,
    /// One-sided reads from the receiver's region.
    Get,
    /// One message at a time, sent back by the receiver.
    Pingpong,
}

#[derive(Args)]
pub struct RawArgs {
    /// tcp, shm, ucx (UCX with whatever `UCX_TLS` selects) or ofi+<provider> (shm, tcp,
    /// verbs, efa, cxi).
    #[arg(long)]
    transport: Fabric,
    #[arg(long, value_enum, default_value = "send")]
    op: Op,
    /// Bytes per message body.
    #[arg(long, default_value_t = 1 << 20)]
    size: usize,
    /// Messages timed (default: about 16 GB worth, from 2,000 to 2,000,000).
    #[arg(long)]
    count: Option<u64>,
    /// Messages (or one-sided transfers) sent before the clock starts and left out of every
    /// figure, as ucx_perftest's `-w` leaves out its warm-up iterations.
    #[arg(long, default_value_t = 0)]
    warmup: u64,
    /// Concurrent streams on the one connection.
    #[arg(long, default_value_t = 1)]
    streams: usize,
    /// Bytes in each shared-memory ring (a power of two, at least 8 MiB).
    #[arg(long, default_value_t = Config::default().shm_ring_bytes)]
    shm_ring_bytes: usize,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Send from memory UCX allocated (ucp_mem_map) and nobody wrote, as ucx_perftest does,
    /// to compare with it like for like (ucx only). Where it lies depends on UCX_TLS: with
    /// tcp it reads as the kernel's one zero page, which stays in cache and is cheap to copy.
    #[arg(long)]
    ucx_body: bool,
}

#[derive(Args)]
pub struct ServerArgs {
    #[arg(long)]
    listen: String,
    #[arg(long, value_enum, default_value = "send")]
    op: Op,
    /// Bytes in the region one-sided transfers use.
    #[arg(long, default_value_t = 1 << 20)]
    size: usize,
    /// Streams the sender will open.
    #[arg(long)]
    streams: usize,
    /// Messages the sender will send in all (sizes the latency record up front).
    #[arg(long)]
    count: u64,
    #[arg(long, default_value_t = Config::default().shm_ring_bytes)]
    shm_ring_bytes: usize,
}

/// One message in this many carries its send time, and the receiver reads the clock for it
/// alone: reading it for every message cost a tenth of a 4 KiB run over shm (both sides).
const LATENCY_EVERY: u64 = 16;

fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into memory we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn run(a: RawArgs) -> Result<()> {
    if a.size == 0 || a.streams == 0 {
        bail!("--size and --streams must be at least 1");
    }
    if a.ucx_body && a.transport != Fabric::Ucx {
        bail!("--ucx-body needs --transport ucx");
    }
    let count = a.count.unwrap_or_else(|| (16_000_000_000 / a.size as u64).clamp(2_000, 2_000_000));
    let (key, text) = Key::generate()?;
    let url = match a.transport.address_kind() {
        AddressKind::SocketPath => format!("{}://@wirespeed-bench-{}", a.transport, std::process::id()),
        AddressKind::HostPort => format!("{}://127.0.0.1:0", a.transport),
    };
    let mut server = Server::spawn(&url, &text, &a, a.warmup + count)?;
    let conn = wirespeed::connect(&server.url, &key, &Config::default()).context("connecting to the receiver")?;
    let body = if a.ucx_body { wirespeed::transport::ucx::allocated_bytes(a.size)? } else { page_aligned(a.size) };
    let (t0, last, latencies_ns) = match a.op {
        Op::Send => send_all(&conn, &body, a.streams, a.warmup, count)?,
        Op::Pingpong => ping_pong(&conn, &body, a.warmup, count)?,
        op => one_sided(&conn, op, a.size, a.warmup, count)?,
    };
    conn.close();
    server.wait()?;
    Report {
        transport: a.transport.to_string(),
        message_bytes: a.size,
        messages: count,
        streams: a.streams,
        seconds: (last.saturating_sub(t0)) as f64 / 1e9,
        latencies_ns,
    }
    .print(a.json);
    Ok(())
}

/// `size` bytes of 0x5a starting on a page boundary, as applications' buffers (and
/// ucx_perftest's) do; the allocator's own large blocks start 16 bytes in, which slows the
/// kernel's page-by-page copies (CMA) for every page that follows.
fn page_aligned(size: usize) -> wirespeed::Bytes {
    let v = wirespeed::Bytes::from(vec![0x5au8; size + 4096]);
    let skip = v.as_ptr().align_offset(4096);
    v.slice(skip..skip + size)
}

/// Sends `warmup` and then `count` messages from this one thread, taking the streams in turns.
/// Returns when the receiver got the last one: when the timed messages started, when the last
/// arrived, and the latency of each timed one.
fn send_all(
    conn: &Connection,
    body: &wirespeed::Bytes,
    streams: usize,
    warmup: u64,
    count: u64,
) -> Result<(u64, u64, Vec<u64>)> {
    let streams = (0..streams).map(|_| conn.open_stream()).collect::<wirespeed::Result<Vec<_>>>()?;
    let mut t0 = now_ns();
    for i in 0..warmup + count {
        if i == warmup {
            t0 = now_ns();
        }
        let timed = i >= warmup && (i - warmup).is_multiple_of(LATENCY_EVERY);
        let stamp = if timed { now_ns() } else { 0 };
        streams[i as usize % streams.len()].send_bytes(&stamp.to_le_bytes(), std::slice::from_ref(body))?;
    }
    let (mut last, mut latencies) = (0, Vec::with_capacity(count as usize));
    for st in &streams {
        st.finish()?;
    }
    for st in &streams {
        let reply = st.recv()?.context("the receiver sent no results")?;
        last = last.max(u64::from_le_bytes(reply.header.as_slice().try_into().context("bad result header")?));
        let bytes = reply.body.to_vec();
        latencies.extend(bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))));
        // Read to the end: dropping a stream the peer has not finished cancels it.
        if st.recv()?.is_some() {
            bail!("the receiver sent more than its results");
        }
    }
    Ok((t0, last, latencies))
}

/// Sends `warmup` and then `count` messages one at a time, each after the receiver has sent
/// the one before back; each latency is half the round trip. Returns as `send_all` does.
fn ping_pong(conn: &Connection, body: &wirespeed::Bytes, warmup: u64, count: u64) -> Result<(u64, u64, Vec<u64>)> {
    let st = conn.open_stream()?;
    let mut latencies = Vec::with_capacity(count as usize);
    let (mut t0, mut last) = (now_ns(), 0);
    for i in 0..warmup + count {
        let t = now_ns();
        if i == warmup {
            t0 = t;
        }
        st.send_bytes(&[], std::slice::from_ref(body))?;
        let back = st.recv()?.context("the receiver ended the stream")?;
        last = now_ns();
        if back.body.len() != body.len() as u64 {
            bail!("the receiver sent back {} bytes of {}", back.body.len(), body.len());
        }
        if i >= warmup {
            latencies.push((last - t) / 2);
        }
    }
    st.finish()?;
    if st.recv()?.is_some() {
        bail!("the receiver sent more than it was sent");
    }
    Ok((t0, last, latencies))
}

/// Moves `warmup` and then `count` blocks of `size` bytes one-sidedly; each latency is one
/// whole transfer. Returns as `send_all` does.
fn one_sided(conn: &Connection, op: Op, size: usize, warmup: u64, count: u64) -> Result<(u64, u64, Vec<u64>)> {
    let st = conn.open_stream()?;
    st.send(b"region?", &[])?;
    let reply = st.recv()?.context("the receiver sent no region")?;
    let remote = conn.remote_region(&reply.header)?;
    let mut buf = vec![0x5au8; size];
    let mut latencies = Vec::with_capacity(count as usize);
    let (mut t0, mut last) = (now_ns(), 0);
    for i in 0..warmup + count {
        let t = now_ns();
        if i == warmup {
            t0 = t;
        }
        match op {
            Op::Put => conn.put(&remote, 0, &buf)?,
            _ => conn.get(&remote, 0, &mut buf)?,
        }
        last = now_ns();
        if i >= warmup {
            latencies.push(last - t);
        }
    }
    st.finish()?;
    if st.recv()?.is_some() {
        bail!("the receiver sent more than its region");
    }
    Ok((t0, last, latencies))
}

/// The receiver process.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn spawn(url: &str, key_text: &str, a: &RawArgs, count: u64) -> Result<Server> {
        let exe = std::env::current_exe()?;
        let mut child = Command::new(exe)
            .args(["bench", "raw-server", "--listen", url, "--size", &a.size.to_string()])
            .args(["--op", a.op.to_possible_value().expect("no skipped values").get_name()])
            .args(["--streams", &a.streams.to_string(), "--count", &count.to_string()])
            .args(["--shm-ring-bytes", &a.shm_ring_bytes.to_string()])
            .env(KEY_ENV, key_text)
            .stdout(Stdio::piped())
            .spawn()
            .context("starting the receiver process")?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
        let Some(url) = line.trim().strip_prefix("listening ") else {
            let _ = child.kill();
            bail!("the receiver did not start");
        };
        Ok(Server { url: url.to_string(), child })
    }

    fn wait(&mut self) -> Result<()> {
        let status = self.child.wait()?;
        if !status.success() {
            bail!("the receiver failed: {status}");
        }
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The receiver: one thread serves every stream, as `next_ready` hands them out.
pub fn serve(a: ServerArgs) -> Result<()> {
    let key = Key::require(None)?;
    let config = Config { shm_ring_bytes: a.shm_ring_bytes, ..Config::default() };
    let listener = wirespeed::listen(&a.listen, &key, &config)?;
    println!("listening {}", listener.url());
    let conn = listener.accept()?;
    match a.op {
        Op::Send => {}
        Op::Pingpong => return serve_ping_pong(&conn),
        Op::Put | Op::Get => return serve_region(&conn, a.size),
    }
    let per_stream = (a.count / a.streams.max(1) as u64 + 1) as usize;
    // Per stream: the stream, the latencies so far, and when its last message arrived.
    // A few streams, looked up once a message: a BTreeMap beats hashing (SipHash) the id.
    let mut open = BTreeMap::new();
    let mut done = 0;
    while done < a.streams {
        match conn.next_ready()? {
            Ready::Accept => {
                let st = conn.accept_stream()?;
                open.insert(st.id(), (st, Vec::with_capacity((per_stream / LATENCY_EVERY as usize + 1) * 8), 0));
            }
            Ready::Stream(id) => {
                let (st, lat, last) = open.get_mut(&id).context("a stream was ready before it was accepted")?;
                if let Some(m) = st.recv()? {
                    let sent = u64::from_le_bytes(m.header.as_slice().try_into().context("bad message header")?);
                    if sent != 0 {
                        *last = now_ns();
                        lat.extend_from_slice(&last.saturating_sub(sent).to_le_bytes());
                    }
                } else {
                    // The stream's end follows its last message at once.
                    let (st, lat, _) = open.remove(&id).expect("present");
                    let last = now_ns();
                    st.send(&last.to_le_bytes(), &[&lat])?;
                    st.finish()?;
                    done += 1;
                }
            }
        }
    }
    wait_for_close(&conn);
    Ok(())
}

/// Waits until the sender closes: exiting earlier, with its last credit grants unread, would
/// make the kernel reset the connection under it.
fn wait_for_close(conn: &Connection) {
    while conn.accept_stream().is_ok() {}
}

/// Sends every message on the sender's stream back as it came, until the stream ends.
fn serve_ping_pong(conn: &Connection) -> Result<()> {
    let st = conn.accept_stream()?;
    while let Some(m) = st.recv()? {
        let chunks: Vec<&[u8]> = m.body.chunks().iter().map(|c| &c[..]).collect();
        st.send(&[], &chunks)?;
    }
    st.finish()?;
    wait_for_close(conn);
    Ok(())
}

/// Exposes a region to the sender and waits (reading, which emulated transfers need) until
/// it is done.
fn serve_region(conn: &Connection, size: usize) -> Result<()> {
    let region = conn.register(size)?;
    let mut st = conn.accept_stream()?;
    st.recv()?.context("the sender asked for nothing")?;
    st.send(region.descriptor(), &[])?;
    // The transfers can take longer than one ordinary wait.
    st.set_timeout(std::time::Duration::from_secs(3600));
    if st.recv()?.is_some() {
        bail!("the sender sent a message during one-sided transfers");
    }
    st.finish()?;
    wait_for_close(conn);
    Ok(())
}
