//! A blocking Flight client that takes the fastest plane each call can use: shared memory on
//! the same host, then ucx, then tcp, and plain gRPC against any other Flight server or when no
//! data-plane key is at hand. The caller's code is the same whichever plane carries the data.

pub(crate) mod flight_actions;
pub mod plane_client;
pub mod stream;

use std::sync::Arc;

use crate::runtime::Runtime;
use arrow_array::RecordBatch;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightEndpoint, FlightInfo, Ticket,
};
use arrow_schema::SchemaRef;
use bytes::Bytes;
use futures::StreamExt;
use prost::Message as _;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::{AsciiMetadataKey, MetadataValue};
use tonic::transport::Channel;
use wirespeed::Key;

pub use plane_client::{ExchangeReader, PlaneClient};
pub use stream::{FlightReader, FlightWriter, PutResults};
use stream::{GrpcWriter, WriterInner};

use crate::discovery::plane_action;
use crate::discovery::{self, CALL_HEADER, HELLO_HEADER, PLANES_HEADER};
use crate::error::{Error, Result};
use crate::grpc::tls::ClientTls;
use crate::grpc::{self, MAX_MESSAGE};
use crate::ipc::WriteOptions;
use crate::location::PlaneLocation;
pub use crate::plane::proto::Method;
use wirespeed::Fabric;

/// Which plane a client may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PlaneChoice {
    /// The fastest one offered and reachable, else gRPC.
    Auto,
    /// gRPC only, like any Flight client.
    Grpc,
    /// This data plane or an error.
    Only(Fabric),
}

impl std::str::FromStr for PlaneChoice {
    type Err = wirespeed::ParseError;

    /// `auto`, `grpc` or a fabric's name: what `--transport` and `transport=` take.
    fn from_str(s: &str) -> std::result::Result<Self, wirespeed::ParseError> {
        match s {
            "auto" => Ok(PlaneChoice::Auto),
            "grpc" => Ok(PlaneChoice::Grpc),
            _ => s
                .parse()
                .map(PlaneChoice::Only)
                .map_err(|_| wirespeed::ParseError::new("transport", s, format!("auto, grpc, {}", Fabric::names()))),
        }
    }
}

/// The plane a call ran on, for reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Plane {
    /// gRPC, as any Flight client.
    Grpc,
    /// A data plane over this fabric.
    Data(Fabric),
}

impl Plane {
    /// The plane's name: `grpc`, or the fabric's.
    pub fn name(self) -> &'static str {
        match self {
            Plane::Grpc => "grpc",
            Plane::Data(k) => k.name(),
        }
    }
}

/// A Flight client that moves a call's data over the fastest data plane the server offers and
/// this end can reach (with the server's key), and over gRPC otherwise, as any Flight client.
///
/// ```
/// use std::sync::Arc;
///
/// use arrow_array::{ArrayRef, Int64Array, RecordBatch};
/// use wirespeed_flight::{Client, FlightDescriptor, FlightEndpoint, FlightInfo, Handler, Output, Payload, Result};
/// use wirespeed_flight::{Server, Ticket};
///
/// /// A service of one flight, 1000 numbers.
/// struct Numbers;
///
/// fn numbers() -> RecordBatch {
///     RecordBatch::try_from_iter([("x", Arc::new(Int64Array::from_iter_values(0..1000)) as ArrayRef)]).unwrap()
/// }
///
/// impl Handler for Numbers {
///     fn get_flight_info(&self, descriptor: &FlightDescriptor) -> Result<FlightInfo> {
///         let endpoint = FlightEndpoint::new().with_ticket(Ticket::new("numbers"));
///         Ok(FlightInfo::new().try_with_schema(&numbers().schema())?.with_descriptor(descriptor.clone()).with_endpoint(endpoint))
///     }
///
///     fn do_get(&self, _ticket: &[u8]) -> Result<Output> {
///         let batch = numbers();
///         Ok(Output::new(batch.schema(), std::iter::once(Ok(Payload::batch(batch)))))
///     }
/// }
///
/// # fn main() -> Result<()> {
/// let key = wirespeed::Key::new("a shared secret")?;
/// let server = Server::builder(Numbers).key(key.clone()).listen("127.0.0.1:0").start()?;
///
/// let client = Client::connect(&server.url())?.with_key(key);
/// let info = client.get_flight_info(&FlightDescriptor::new_path(vec!["numbers".into()]))?;
/// let reader = client.do_get(&info.endpoint[0])?;
/// assert_ne!(reader.plane(), wirespeed_flight::Plane::Grpc); // shm: one host, and the key
/// let rows: usize = reader.map(|b| b.map(|b| b.num_rows())).sum::<Result<usize>>()?;
/// assert_eq!(rows, 1000);
/// # Ok(())
/// # }
/// ```
pub struct Client {
    runtime: Arc<Runtime>,
    grpc: FlightServiceClient<Channel>,
    token: Option<MetadataValue<tonic::metadata::Ascii>>,
    planes: Option<PlaneClient>,
    transport: PlaneChoice,
    /// The server's host as the URL names it.
    host: String,
    /// Whether the server answered our hello, once known.
    offers: std::sync::Mutex<Option<bool>>,
    /// The session cookie the server set (see [`Client::set_session_options`]).
    session: std::sync::Mutex<Option<MetadataValue<tonic::metadata::Ascii>>>,
    /// Headers every gRPC call carries.
    headers: Vec<(AsciiMetadataKey, MetadataValue<tonic::metadata::Ascii>)>,
    /// How long each gRPC call may take.
    timeout: Option<std::time::Duration>,
}

impl Client {
    /// Connects to `grpc://host:port` (or `grpc+tcp://`), or to `grpc+tls://host:port`
    /// checking the server against the system's roots. Without a key ([`Client::with_key`],
    /// [`Client::with_key_from_env`]) every call uses gRPC.
    pub fn connect(url: &str) -> Result<Self> {
        Self::connect_tls(url, &ClientTls::default())
    }

    /// As [`Client::connect`], with what a `grpc+tls://` connection trusts and presents
    /// (unused for `grpc://`).
    pub fn connect_tls(url: &str, tls: &ClientTls) -> Result<Self> {
        let runtime = Runtime::new(2, "flight-client")?;
        let channel = runtime.block_on(grpc::channel::connect(url, tls))?;
        let grpc = FlightServiceClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        let host = grpc::channel::host(url).unwrap_or_default();
        Ok(Client {
            runtime: Arc::new(runtime),
            grpc,
            token: None,
            planes: None,
            transport: PlaneChoice::Auto,
            host,
            offers: Default::default(),
            session: Default::default(),
            headers: Vec::new(),
            timeout: None,
        })
    }

    /// With the key in `WIRESPEED_KEY`, if it is set; an empty one is an error.
    pub fn with_key_from_env(self) -> Result<Self> {
        Ok(match Key::from_env_or_file(None)? {
            Some(key) => self.with_key(key),
            None => self,
        })
    }

    /// The key for data planes; without one every call uses gRPC.
    pub fn with_key(mut self, key: Key) -> Self {
        self.planes = Some(PlaneClient::new(key).with_transport(self.transport).reached(&self.host));
        self
    }

    /// Which planes calls may take (by default [`PlaneChoice::Auto`]).
    pub fn with_transport(mut self, transport: PlaneChoice) -> Self {
        self.transport = transport;
        self.planes = self.planes.map(|p| p.with_transport(transport));
        self
    }

    /// Every gRPC call carries these headers (as pyarrow's `FlightCallOptions.headers`).
    pub fn with_headers(mut self, headers: &[(String, String)]) -> Result<Self> {
        for (name, value) in headers {
            let bad = || Error::invalid_argument(format!("header {name:?}: not a valid gRPC header"));
            self.headers.push((name.parse().map_err(|_| bad())?, value.parse().map_err(|_| bad())?));
        }
        Ok(self)
    }

    /// Each gRPC call fails with DEADLINE_EXCEEDED past `timeout` (a data plane's call has
    /// the plane's own timeout).
    pub fn with_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Flight's Basic-then-Bearer handshake; later calls carry the token.
    pub fn authenticate(&mut self, user: &str, password: &str) -> Result<()> {
        let mut request = self.request(futures::stream::iter([arrow_flight::HandshakeRequest::default()]));
        let basic =
            grpc::auth::basic(user, password).parse().map_err(|_| Error::invalid_argument("bad credentials"))?;
        request.metadata_mut().insert("authorization", basic);
        let mut grpc = self.grpc.clone();
        let response = self.runtime.block_on(grpc.handshake(request))?;
        let token = response
            .metadata()
            .get("authorization")
            .cloned()
            .ok_or_else(|| Error::unauthenticated("the server sent no bearer token"))?;
        self.token = Some(token);
        Ok(())
    }

    /// Later calls carry `authorization` (a header value, as another client's handshake got
    /// it: `Bearer ...`), or none.
    pub fn set_authorization(&mut self, authorization: Option<&str>) -> Result<()> {
        self.token = match authorization {
            None => None,
            Some(value) => Some(value.parse().map_err(|_| Error::invalid_argument("the authorization is not ASCII"))?),
        };
        Ok(())
    }

    /// The bearer token from [`Client::authenticate`], as the `authorization` header's value.
    pub fn token(&self) -> Option<String> {
        self.token.as_ref().and_then(|t| t.to_str().ok()).map(str::to_string)
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        for (name, value) in &self.headers {
            request.metadata_mut().insert(name.clone(), value.clone());
        }
        if let Some(timeout) = self.timeout {
            request.set_timeout(timeout);
        }
        if let Some(token) = &self.token {
            request.metadata_mut().insert("authorization", token.clone());
        }
        if let Some(cookie) = self.session.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            request.metadata_mut().insert("cookie", cookie);
        }
        request
    }

    /// ListFlights: every flight matching `criteria` (empty for all).
    pub fn list_flights(&self, criteria: &[u8]) -> Result<Vec<FlightInfo>> {
        let mut grpc = self.grpc.clone();
        let request = self.request(Criteria { expression: Bytes::copy_from_slice(criteria) });
        self.runtime.block_on(async move {
            let mut stream = grpc.list_flights(request).await?.into_inner();
            let mut out = Vec::new();
            while let Some(info) = stream.message().await? {
                out.push(info);
            }
            Ok(out)
        })
    }

    /// GetFlightInfo: where and how to read the flight `descriptor` names.
    pub fn get_flight_info(&self, descriptor: &FlightDescriptor) -> Result<FlightInfo> {
        let mut grpc = self.grpc.clone();
        let request = self.request(descriptor.clone());
        Ok(self.runtime.block_on(grpc.get_flight_info(request))?.into_inner())
    }

    /// GetSchema: the flight's schema alone.
    pub fn get_schema(&self, descriptor: &FlightDescriptor) -> Result<SchemaRef> {
        let mut grpc = self.grpc.clone();
        let request = self.request(descriptor.clone());
        let result = self.runtime.block_on(grpc.get_schema(request))?.into_inner();
        Ok(Arc::new(arrow_schema::Schema::try_from(&result)?))
    }

    /// DoAction: runs `action` on the server and gathers its results' bodies.
    pub fn do_action(&self, action: Action) -> Result<Vec<Bytes>> {
        self.action(self.request(action))
    }

    fn action(&self, request: tonic::Request<Action>) -> Result<Vec<Bytes>> {
        let mut grpc = self.grpc.clone();
        self.runtime.block_on(async move {
            let mut stream = grpc.do_action(request).await?.into_inner();
            let mut out = Vec::new();
            while let Some(r) = stream.message().await? {
                out.push(r.body);
            }
            Ok(out)
        })
    }

    /// ListActions: the actions the server offers.
    pub fn list_actions(&self) -> Result<Vec<ActionType>> {
        let mut grpc = self.grpc.clone();
        let request = self.request(Empty {});
        self.runtime.block_on(async move {
            let stream = grpc.list_actions(request).await?.into_inner();
            Ok(stream.collect::<Vec<_>>().await.into_iter().collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// Whether this server answered our hello (see [`crate::discovery`]), asked once with
    /// ListActions, which any Flight server answers; a failed ask is not remembered.
    fn offers_planes(&self) -> Result<bool> {
        let Some(planes) = &self.planes else { return Ok(false) };
        if self.transport == PlaneChoice::Grpc {
            return Ok(false);
        }
        if let Some(known) = *self.offers.lock().unwrap_or_else(|p| p.into_inner()) {
            return Ok(known);
        }
        let request = self.hello(planes, Empty {}, "hello")?;
        let mut grpc = self.grpc.clone();
        let offered = match self.runtime.block_on(grpc.list_actions(request)) {
            Ok(response) => response.metadata().contains_key(PLANES_HEADER),
            Err(_) => return Ok(false),
        };
        *self.offers.lock().unwrap_or_else(|p| p.into_inner()) = Some(offered);
        Ok(offered)
    }

    /// A request that carries our hello, for `call` (see [`CALL_HEADER`]).
    fn hello<T>(&self, planes: &PlaneClient, message: T, call: &'static str) -> Result<tonic::Request<T>> {
        let mut request = self.request(message);
        let value =
            discovery::hello(planes.key())?.parse().map_err(|_| Error::internal("hello is not a header value"))?;
        request.metadata_mut().insert(HELLO_HEADER, value);
        request.metadata_mut().insert(CALL_HEADER, tonic::metadata::MetadataValue::from_static(call));
        Ok(request)
    }

    /// One of our actions, asking for the locations of a `method` call, with the hello that
    /// lets the server answer it.
    fn action_with_hello(&self, method: Method, action: Action) -> Result<Vec<Bytes>> {
        let planes = self.planes.as_ref().ok_or_else(|| Error::internal("no key for a data-plane action"))?;
        self.action(self.hello(planes, action, method.name())?)
    }

    /// Reads one endpoint of a flight: over a data plane its locations name, else one this
    /// server offers for its ticket, else gRPC.
    pub fn do_get(&self, endpoint: &FlightEndpoint) -> Result<FlightReader> {
        let ticket = endpoint.ticket.clone().ok_or_else(|| Error::invalid_argument("the endpoint has no ticket"))?;
        let uris: Vec<String> = endpoint.location.iter().map(|l| l.uri.clone()).collect();
        if !uris.iter().any(|u| PlaneLocation::parse(u).is_some()) {
            return self.do_get_ticket(&ticket.ticket);
        }
        self.get_over(&uris, ticket)
    }

    /// Reads a ticket from this server, as pyarrow's `do_get(ticket)` does: a wirespeed server
    /// is asked for data-plane locations first (one more round trip); others serve it on gRPC.
    pub fn do_get_ticket(&self, ticket: &[u8]) -> Result<FlightReader> {
        let ticket = Ticket { ticket: Bytes::copy_from_slice(ticket) };
        let uris = self.plane_locations(Method::Get, &ticket.ticket)?;
        self.get_over(&uris, ticket)
    }

    fn get_over(&self, uris: &[String], ticket: Ticket) -> Result<FlightReader> {
        if let Some(reader) = self.planes()?.map(|p| p.get(uris, &ticket.ticket)).transpose()?.flatten() {
            return Ok(reader);
        }
        let mut grpc = self.grpc.clone();
        let request = self.request(ticket);
        let stream = self.runtime.block_on(grpc.do_get(request))?.into_inner();
        FlightReader::from_grpc(stream, &self.runtime)
    }

    /// Reads a whole flight, endpoint after endpoint.
    pub fn get(&self, descriptor: &FlightDescriptor) -> Result<(SchemaRef, Vec<RecordBatch>)> {
        let info = self.get_flight_info(descriptor)?;
        let mut schema = Arc::new(info.clone().try_decode_schema()?);
        let mut batches = Vec::new();
        for endpoint in &info.endpoint {
            let mut reader = self.do_get(endpoint)?;
            schema = reader.schema()?;
            for batch in reader {
                batches.push(batch?);
            }
        }
        Ok((schema, batches))
    }

    /// The data-plane half, unless this client uses gRPC only; asking for one plane without a
    /// key is an error.
    fn planes(&self) -> Result<Option<&PlaneClient>> {
        match (&self.planes, self.transport) {
            (_, PlaneChoice::Grpc) => Ok(None),
            (None, PlaneChoice::Only(_)) => Err(Error::unauthenticated("a data plane needs a key (WIRESPEED_KEY)")),
            (planes, _) => Ok(planes.as_ref()),
        }
    }

    /// Where this server would run a call of `method` on `target` (a ticket, or an encoded
    /// FlightDescriptor): data-plane location URIs, each with a capability for this call alone;
    /// none from a server without planes.
    pub fn plane_locations(&self, method: Method, target: &[u8]) -> Result<Vec<String>> {
        if !self.offers_planes()? {
            return Ok(Vec::new());
        }
        let action = Action { r#type: plane_action(method), body: Bytes::copy_from_slice(target) };
        match self.action_with_hello(method, action) {
            Ok(uris) => Ok(uris.iter().map(|u| String::from_utf8_lossy(u).into_owned()).collect()),
            Err(e) if e.code() == tonic::Code::Unimplemented || e.code() == tonic::Code::InvalidArgument => {
                Ok(Vec::new())
            }
            Err(e) => Err(e),
        }
    }

    /// Starts an upload of batches with `schema` to `descriptor`.
    pub fn do_put(&self, descriptor: &FlightDescriptor, schema: &SchemaRef) -> Result<FlightWriter> {
        if let Some(planes) = self.planes()? {
            let uris = self.plane_locations(Method::Put, &descriptor.encode_to_vec())?;
            if let Some(writer) = planes.put(&uris, descriptor, schema, WriteOptions::default())? {
                return Ok(writer);
            }
        }
        let (tx, results) = std::sync::mpsc::channel();
        let (writer, call) = self.grpc_stream(descriptor, schema, |mut grpc, request| async move {
            let mut answers = grpc.do_put(request).await?.into_inner();
            while let Some(r) = answers.message().await? {
                let _ = tx.send(r.app_metadata);
            }
            Ok(())
        })?;
        let inner = WriterInner::GrpcPut { writer, call: Some(call), results: Some(PutResults::grpc(results)) };
        Ok(FlightWriter { inner })
    }

    /// Starts an exchange: write to the first half, read from the second.
    pub fn do_exchange(
        &self,
        descriptor: &FlightDescriptor,
        schema: &SchemaRef,
    ) -> Result<(FlightWriter, FlightReader)> {
        if let Some(planes) = self.planes()? {
            let uris = self.plane_locations(Method::Exchange, &descriptor.encode_to_vec())?;
            if let Some((mut writer, reader)) = planes.exchange(&uris, descriptor)? {
                writer.begin(schema)?;
                return Ok((writer, reader.open()?));
            }
        }
        let runtime = self.runtime.clone();
        let (writer, call) = self.grpc_stream(descriptor, schema, |mut grpc, request| async move {
            Ok(grpc.do_exchange(request).await?.into_inner())
        })?;
        let stream = runtime.block_on(call).map_err(|e| Error::internal(e.to_string()))??;
        let reader = FlightReader::from_grpc(stream, &runtime)?;
        Ok((FlightWriter { inner: WriterInner::GrpcExchange { writer } }, reader))
    }

    /// Starts a streaming gRPC call whose request stream the returned writer feeds.
    fn grpc_stream<T, F, Fut>(
        &self,
        descriptor: &FlightDescriptor,
        schema: &SchemaRef,
        call: F,
    ) -> Result<(GrpcWriter, JoinHandle<Result<T>>)>
    where
        T: Send + 'static,
        F: FnOnce(FlightServiceClient<Channel>, tonic::Request<ReceiverStream<FlightData>>) -> Fut,
        Fut: std::future::Future<Output = Result<T>> + Send + 'static,
    {
        let (encoder, first) = grpc::Writer::start(Some(schema), WriteOptions::default())?;
        let mut first = grpc::flight_data(first.into_iter().next().unwrap_or_default());
        first.flight_descriptor = Some(descriptor.clone());
        let (tx, rx) = mpsc::channel(2);
        tx.try_send(first).map_err(|_| Error::internal("request queue full at start"))?;
        let handle = self.runtime.spawn(call(self.grpc.clone(), self.request(ReceiverStream::new(rx))));
        Ok((GrpcWriter { encoder, tx: Some(tx), runtime: self.runtime.clone() }, handle))
    }
}
