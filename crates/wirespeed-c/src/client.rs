//! The Flight client: any Flight server over gRPC, and a wirespeed server's data planes with
//! its key. FlightInfo and FlightDescriptor travel as their standard protobuf bytes, which
//! every language's Flight library encodes and decodes; batches as Arrow C streams.

use std::ffi::c_char;

use arrow_array::ffi::FFI_ArrowSchema;
use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_flight::{Action, FlightDescriptor};
use bytes::Bytes;
use prost::Message;
use wirespeed_flight::server::travels_in_clear;
use wirespeed_flight::{Client, ClientTls, Error, PlaneChoice, Result};

use crate::args::{bytes, needs, out, text};
use crate::buffers::{WsBuffer, WsBuffers};
use crate::cancel::{self, WsCancel};
use crate::error::{WsError, WsStatus, guard};
use crate::handles::Handles;
use crate::options::{Options, WsOption};
use crate::streams::{self, Imported};

/// A connection to one Flight server (opaque); safe to use from many threads at once.
pub struct WsClient {
    _opaque: [u8; 0],
}

static CLIENTS: Handles<Client> = Handles::new("the client");

const CLIENT_OPTIONS: &str = "key, key_file, transport, tls_roots, tls_cert_chain, tls_private_key, \
     tls_override_hostname, tls_disable_server_verification, username, password, password_over_plaintext, \
     header.NAME, timeout (and X_file for any X)";

fn connect(url: &str, mut o: Options) -> Result<Client> {
    let identity = match (o.take("tls_cert_chain")?, o.take("tls_private_key")?) {
        (Some(chain), Some(key)) => Some((chain, key)),
        (None, None) => None,
        _ => return Err(Error::invalid_argument("tls_cert_chain and tls_private_key go together")),
    };
    let tls = ClientTls {
        roots: o.take("tls_roots")?,
        identity,
        server_name: o.take_string("tls_override_hostname")?,
        skip_verification: o.take_flag("tls_disable_server_verification")?,
    };
    let key = o.take_key()?;
    let transport: Option<PlaneChoice> = o.take_parsed("transport", "auto, grpc or a fabric's name")?;
    let login = (o.take_string("username")?, o.take_string("password")?);
    let in_clear = travels_in_clear(url, url.starts_with("grpc+tls://"));
    if login.1.is_some() && in_clear && !o.take_flag("password_over_plaintext")? {
        let why = format!("a password over {url} travels in clear: use grpc+tls://, or password_over_plaintext=true");
        return Err(Error::invalid_argument(why));
    }
    let headers = o.take_prefixed("header.");
    let timeout = o.take_seconds("timeout")?;
    o.finish(CLIENT_OPTIONS)?;
    let mut client = Client::connect_tls(url, &tls)?.with_headers(&headers)?;
    if let Some(timeout) = timeout {
        client = client.with_timeout(timeout);
    }
    if let Some(transport) = transport {
        client = client.with_transport(transport);
    }
    if let Some(key) = key {
        client = client.with_key(key);
    }
    match login {
        (Some(user), Some(password)) => client.authenticate(&user, &password)?,
        (None, None) => {}
        _ => return Err(Error::invalid_argument("username and password go together")),
    }
    Ok(client)
}

/// Connects to `grpc://host:port`, `grpc+tls://host:port` or `grpc+unix://PATH`.
///
/// Options (`X_file` reads X from a file, for any X):
/// - `key`: the data planes' key (without one, every call uses gRPC);
/// - `transport`: `auto` (the default: the fastest plane offered), `grpc`, or one plane (`shm`,
///   `tcp`, `ucx`, `ofi+tcp`, ...; an error if it cannot be used);
/// - `tls_roots` (PEM, instead of the system's), `tls_cert_chain` and `tls_private_key` (PEM,
///   for mutual TLS), `tls_override_hostname`, `tls_disable_server_verification` (`true`);
/// - `username` and `password`: Flight's Basic handshake, then every call carries its token
///   (refused over `grpc://`, where it would travel in clear, unless `password_over_plaintext`
///   is `true`);
/// - `header.NAME`: a header every gRPC call carries;
/// - `timeout`: seconds each gRPC call may take.
///
/// # Safety
/// `url` is a NUL-terminated string, `options` null or `options_len` WsOptions, `client` a
/// place for the handle, `error` null or a WsError (zeroed or filled by this library).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ws_client_connect(
    url: *const c_char,
    options: *const WsOption,
    options_len: usize,
    client: *mut *mut WsClient,
    error: *mut WsError,
) -> WsStatus {
    guard(error, || {
        needs(client, "client")?;
        // SAFETY: the caller's contract.
        let (url, o) = unsafe { (text(url, "url")?, Options::read(options, options_len)?) };
        let connected = connect(url, o)?;
        // SAFETY: the caller's contract.
        unsafe { out(client, "client", CLIENTS.insert(connected)) }
    })
}

/// Releases `client`. Streams it opened and arrays they gave out stay valid until released.
///
/// # Safety
/// `error` is null or a WsError.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ws_client_release(client: *const WsClient, error: *mut WsError) -> WsStatus {
    guard(error, || CLIENTS.remove(client).map(drop))
}

/// # Safety
/// `data` is null or points to `len` bytes.
unsafe fn descriptor(data: *const u8, len: usize) -> Result<FlightDescriptor> {
    // SAFETY: the caller's contract.
    let raw = unsafe { bytes(data, len, "descriptor")? };
    FlightDescriptor::decode(raw).map_err(|e| Error::invalid_argument(format!("not a FlightDescriptor: {e}")))
}

/// ListFlights: a FlightInfo (protobuf) per flight matching `criteria` (empty for all).
///
/// # Safety
/// Pointers as their names say, each valid for the call; `error` is null or a WsError.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ws_client_list_flights(
    client: *const WsClient,
    criteria: *const u8,
    criteria_len: usize,
    infos: *mut WsBuffers,
    error: *mut WsError,
) -> WsStatus {
    guard(error, || {
        needs(infos, "infos")?;
        // SAFETY: the caller's contract.
        let criteria = unsafe { bytes(criteria, criteria_len, "criteria")? };
        let list = CLIENTS.get(client)?.list_flights(criteria)?;
        let encoded = list.iter().map(|i| Bytes::from(i.encode_to_vec())).collect();
        // SAFETY: the caller's contract.
        unsafe { out(infos, "infos", WsBuffers::new(encoded)) }
    })
}

/// GetFlightInfo: the FlightInfo (protobuf) of the flight a FlightDescriptor (protobuf) names.
///
/// # Safety
/// Pointers as their names say, each valid for the call; `error` is null or a WsError.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ws_client_get_flight_info(
    client: *const WsClient,
    descriptor: *const u8,
    descriptor_len: usize,
    info: *mut WsBuffer,
    error: *mut WsError,
) -> WsStatus {
    guard(error, || {
        needs(info, "info")?;
        // SAFETY: the caller's contract.
        let d = unsafe { self::descriptor(descriptor, descriptor_len)? };
        let found = CLIENTS.get(client)?.get_flight_info(&d)?;
        // SAFETY: the caller's contract.
        unsafe { out(info, "info", WsBuffer::new(found.encode_to_vec().into())) }
    })
}

/// GetSchema: the schema of the flight a FlightDescriptor (protobuf) names.
///
/// # Safety
/// Pointers as their names say, each valid for the call; `error` is null or a WsError.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ws_client_get_schema(
    client: *const WsClient,
    descriptor: *const u8,
    descriptor_len: usize,
    schema: *mut FFI_ArrowSchema,
    error: *mut WsError,
) -> WsStatus {
    guard(error, || {
        needs(schema, "schema")?;
        // SAFETY: the caller's contract.
        let d = unsafe { self::descriptor(descriptor, descriptor_len)? };
        let found = CLIENTS.get(client)?.get_schema(&d)?;
        let exported = FFI_ArrowSchema::try_from(found.as_ref()).map_err(|e| Error::internal(e.to_string()))?;
        // SAFETY: the caller's contract.
        unsafe { out(schema, "schema", exported) }
    })
}

/// DoGet: the batches of `ticket` as a C stream, over a data plane where the server offers one
/// this client can use, else gRPC. `cancel` may be NULL.
///
/// # Safety
/// Pointers as their names say, each valid for the call; `error` is null or a WsError.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ws_client_do_get(
    client: *const WsClient,
    ticket: *const u8,
    ticket_len: usize,
    cancel: *const WsCancel,
    stream: *mut FFI_ArrowArrayStream,
    error: *mut WsError,
) -> WsStatus {
    guard(error, || {
        needs(stream, "stream")?;
        // SAFETY: the caller's contract.
        let ticket = unsafe { bytes(ticket, ticket_len, "ticket")? };
        let flag = cancel::flag(cancel)?;
        let reader = CLIENTS.get(client)?.do_get_ticket(ticket)?;
        // SAFETY: the caller's contract.
        unsafe { out(stream, "stream", streams::export(reader, flag)?) }
    })
}

/// DoPut: uploads every batch of `input` (moved: the library releases it) to the flight a
/// FlightDescriptor (protobuf) names, and returns the server's PutResults' app_metadata.
///
/// # Safety
/// Pointers as their names say, each valid for the call; `error` is null or a WsError.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ws_client_do_put(
    client: *const WsClient,
    descriptor: *const u8,
    descriptor_len: usize,
    input: *mut FFI_ArrowArrayStream,
    cancel: *const WsCancel,
    results: *mut WsBuffers,
    error: *mut WsError,
) -> WsStatus {
    guard(error, || {
        needs(results, "results")?;
        // SAFETY: the caller's contract.
        let input = unsafe { Imported::new(input, "the input stream")? };
        // SAFETY: the caller's contract.
        let d = unsafe { self::descriptor(descriptor, descriptor_len)? };
        let flag = cancel::flag(cancel)?;
        let schema = input.schema();
        let mut writer = CLIENTS.get(client)?.do_put(&d, &schema)?;
        for batch in input {
            cancel::check(&flag)?; // the writer, dropped unfinished, cancels the call
            writer.write(batch?)?;
        }
        let answers = writer.finish()?;
        // SAFETY: the caller's contract.
        unsafe { out(results, "results", WsBuffers::new(answers)) }
    })
}

/// DoExchange: sends `input`'s batches (moved) on a thread of the library's while the caller
/// reads the server's answer from `output`. A failure to send ends `output` with it.
///
/// # Safety
/// Pointers as their names say, each valid for the call; `error` is null or a WsError.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ws_client_do_exchange(
    client: *const WsClient,
    descriptor: *const u8,
    descriptor_len: usize,
    input: *mut FFI_ArrowArrayStream,
    cancel: *const WsCancel,
    output: *mut FFI_ArrowArrayStream,
    error: *mut WsError,
) -> WsStatus {
    guard(error, || {
        needs(output, "output")?;
        // SAFETY: the caller's contract.
        let input = unsafe { Imported::new(input, "the input stream")? };
        // SAFETY: the caller's contract.
        let d = unsafe { self::descriptor(descriptor, descriptor_len)? };
        let flag = cancel::flag(cancel)?;
        let schema = input.schema();
        let (mut writer, reader) = CLIENTS.get(client)?.do_exchange(&d, &schema)?;
        let sending = flag.clone();
        std::thread::Builder::new()
            .name("ws-exchange".into())
            .spawn(move || {
                for batch in input {
                    let sent = cancel::check(&sending).and_then(|()| writer.write(batch?));
                    if sent.is_err() {
                        return; // dropped unfinished: the call fails, and the reader says why
                    }
                }
                let _ = writer.finish();
            })
            .map_err(|e| Error::internal(format!("starting the exchange's writer: {e}")))?;
        // SAFETY: the caller's contract.
        unsafe { out(output, "output", streams::export(reader, flag)?) }
    })
}

/// DoAction: runs the action `type` with `body` and returns its results' bodies.
///
/// # Safety
/// Pointers as their names say, each valid for the call; `error` is null or a WsError.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ws_client_do_action(
    client: *const WsClient,
    action_type: *const c_char,
    body: *const u8,
    body_len: usize,
    results: *mut WsBuffers,
    error: *mut WsError,
) -> WsStatus {
    guard(error, || {
        needs(results, "results")?;
        // SAFETY: the caller's contract.
        let (kind, body) = unsafe { (text(action_type, "action_type")?, bytes(body, body_len, "body")?) };
        let action = Action { r#type: kind.to_string(), body: Bytes::copy_from_slice(body) };
        let answers = CLIENTS.get(client)?.do_action(action)?;
        // SAFETY: the caller's contract.
        unsafe { out(results, "results", WsBuffers::new(answers)) }
    })
}
