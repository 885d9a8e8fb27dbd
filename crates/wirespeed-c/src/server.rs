//! Servers: a directory served as `wirespeed serve` serves it, or a service of C callbacks
//! (see `callbacks`); both on gRPC and, with a key, every data plane.

use std::ffi::c_char;
use std::path::PathBuf;
use std::sync::Mutex;

use arrow_ipc::CompressionType;
use wirespeed::Fabric;
use wirespeed_flight::{Advertise, Error, Handler, Result, Server, ServerBuilder, ServerTls};
use wirespeed_serve::DirService;

use crate::args::{needs, out, text};
use crate::error::{WsError, WsStatus, guard};
use crate::handles::Handles;
use crate::options::{Options, WsOption};

/// A running server (opaque).
pub struct WsServer {
    _opaque: [u8; 0],
}

static SERVERS: Handles<Mutex<Option<Server>>> = Handles::new("the server");

/// What every server takes, as `wirespeed serve` takes it.
pub(crate) const SERVER_OPTIONS: &str = "key, key_file, planes, password, password_over_plaintext, \
     tls_cert_chain, tls_private_key, tls_client_ca, advertise, handler_threads (and X_file for any X)";

/// Starts `handler` at `listen` with the options every server takes, refusing any left that
/// `known` does not name, and puts its handle in `server`.
///
/// # Safety
/// `server` is null or points to writable memory for a pointer.
pub(crate) unsafe fn start(
    handler: impl Handler,
    listen: &str,
    mut o: Options,
    known: &str,
    server: *mut *mut WsServer,
) -> Result<()> {
    let builder = configure(Server::builder(handler).listen(listen), &mut o)?;
    o.finish(known)?;
    let started = builder.start()?;
    // SAFETY: the caller's contract.
    unsafe { out(server, "server", SERVERS.insert(Mutex::new(Some(started)))) }
}

/// `builder` with the options every server takes (it starts nothing yet).
fn configure(mut builder: ServerBuilder, o: &mut Options) -> Result<ServerBuilder> {
    if let Some(key) = o.take_key()? {
        builder = builder.key(key);
    }
    if let Some(planes) = o.take_string("planes")? {
        let kinds = planes
            .split(',')
            .map(|p| p.trim().parse::<Fabric>())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| Error::invalid_argument(format!("planes {planes:?}: {e}")))?;
        builder = builder.planes(&kinds);
    }
    if let Some(password) = o.take_string("password")? {
        builder = builder.password(password);
    }
    if o.take_flag("password_over_plaintext")? {
        builder = builder.password_over_plaintext();
    }
    match (o.take("tls_cert_chain")?, o.take("tls_private_key")?) {
        (Some(cert_chain), Some(private_key)) => {
            builder = builder.tls(ServerTls { cert_chain, private_key, client_ca: o.take("tls_client_ca")? });
        }
        (None, None) => {}
        _ => return Err(Error::invalid_argument("tls_cert_chain and tls_private_key go together")),
    }
    if let Some(uri) = o.take_string("advertise")? {
        builder = builder.advertise(Advertise::Uri(uri));
    }
    if let Some(threads) = o.take_parsed("handler_threads", "a count of threads")? {
        builder = builder.handler_threads(threads);
    }
    Ok(builder)
}

const DIRECTORY_OPTIONS: &str = "cache_mb, compression (lz4 or zstd), ticket_ttl";

fn directory(root: &str, o: &mut Options) -> Result<DirService> {
    let cache_mb: usize = o.take_parsed("cache_mb", "a count of MB")?.unwrap_or(0);
    let compression = match o.take_string("compression")?.as_deref() {
        None => None,
        Some("lz4") => Some(CompressionType::LZ4_FRAME),
        Some("zstd") => Some(CompressionType::ZSTD),
        Some(other) => return Err(Error::invalid_argument(format!("compression {other:?}: expected lz4 or zstd"))),
    };
    let ttl = o.take_seconds("ticket_ttl")?;
    DirService::new(PathBuf::from(root), cache_mb << 20)?.compression(compression).ticket_ttl(ttl)
}

/// Serves the Arrow and Parquet files under `root` at `listen` (`HOST:PORT`, port 0 for any,
/// or `grpc+unix://PATH`), with uploads, as `wirespeed serve` does.
///
/// Options: `key` (the data planes'; without one, gRPC only), `planes` (`shm,tcp,ucx`, ...),
/// `password` (Flight's Basic handshake; needs TLS unless `password_over_plaintext` is
/// `true`), `tls_cert_chain`, `tls_private_key` and `tls_client_ca` (PEM; the last asks every
/// client for a certificate), `advertise` (the URI endpoints name), `handler_threads`,
/// `cache_mb`, `compression` (`lz4`, `zstd`), `ticket_ttl` (seconds). `X_file` reads X from a
/// file, for any X.
///
/// # Safety
/// Strings NUL-terminated, `options` null or `options_len` WsOptions, `server` a place for the
/// handle, `error` null or a WsError.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ws_server_serve_directory(
    root: *const c_char,
    listen: *const c_char,
    options: *const WsOption,
    options_len: usize,
    server: *mut *mut WsServer,
    error: *mut WsError,
) -> WsStatus {
    guard(error, || {
        needs(server, "server")?;
        // SAFETY: the caller's contract.
        let (root, listen) = unsafe { (text(root, "root")?, text(listen, "listen")?) };
        // SAFETY: the caller's contract.
        let mut o = unsafe { Options::read(options, options_len)? };
        let service = directory(root, &mut o)?;
        // SAFETY: the caller's contract.
        unsafe { start(service, listen, o, &format!("{SERVER_OPTIONS}, {DIRECTORY_OPTIONS}"), server) }
    })
}

/// The TCP port `server` listens on for gRPC (0 on a Unix socket).
///
/// # Safety
/// `port` points to writable memory; `error` is null or a WsError.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ws_server_port(server: *const WsServer, port: *mut u16, error: *mut WsError) -> WsStatus {
    guard(error, || {
        let held = SERVERS.get(server)?;
        let listening = held.lock().unwrap_or_else(|p| p.into_inner());
        let value = listening.as_ref().and_then(|s| s.addr()).map_or(0, |a| a.port());
        // SAFETY: the caller's contract.
        unsafe { out(port, "port", value) }
    })
}

/// Stops `server` and releases it. With `deadline_seconds` > 0 it drains first: health turns
/// NOT_SERVING, new calls get UNAVAILABLE, and calls in flight have that long to finish before
/// they are cancelled. `cancelled` (may be NULL) gets how many were.
///
/// # Safety
/// `cancelled` is null or writable; `error` is null or a WsError.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ws_server_shutdown(
    server: *const WsServer,
    deadline_seconds: f64,
    cancelled: *mut usize,
    error: *mut WsError,
) -> WsStatus {
    guard(error, || {
        let deadline = std::time::Duration::try_from_secs_f64(deadline_seconds.max(0.0))
            .map_err(|_| Error::invalid_argument(format!("deadline {deadline_seconds}: expected seconds")))?;
        let held = SERVERS.remove(server)?;
        let running = held.lock().unwrap_or_else(|p| p.into_inner()).take();
        let n = running.map_or(0, |s| s.shutdown(deadline));
        if !cancelled.is_null() {
            // SAFETY: the caller's contract.
            unsafe { cancelled.write(n) };
        }
        Ok(())
    })
}
