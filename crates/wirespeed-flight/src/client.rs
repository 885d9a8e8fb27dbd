//! A blocking Flight client that takes the fastest plane each call can use: shared memory on
//! the same host, then ucx, then tcp, and plain gRPC against any other Flight server or when no
//! data-plane key is at hand. The caller's code is the same whichever plane carries the data.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightEndpoint, FlightInfo, Ticket,
};
use arrow_schema::SchemaRef;
use bytes::Bytes;
use futures::StreamExt;
use prost::Message as _;
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use wirespeed::{Key, Stream};

use crate::error::{Code, Error, Result};
use crate::grpc::server::{EXCHANGE_ACTION, GET_ACTION, PUT_ACTION};
use crate::grpc::tls::ClientTls;
use crate::grpc::{self, MAX_MESSAGE};
use crate::ipc::DecodedStream;
use crate::location::PlaneLocation;
use crate::plane::client::Planes;
use crate::plane::hello::{self, HELLO_HEADER, PLANES_HEADER};
use crate::plane::proto::Method;
use crate::plane::{self, close};
use crate::service::Payload;
use wirespeed::Fabric;

/// How long `next_result` waits for a PutResult over gRPC (a data plane's stream has its own
/// timeout).
const RESULT_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

/// Which plane a client may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// The fastest one offered and reachable, else gRPC.
    Auto,
    /// gRPC only, like any Flight client.
    Grpc,
    /// This data plane or an error.
    Only(Fabric),
}

/// The plane a call ran on, for reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plane {
    Grpc,
    Data(Fabric),
}

impl Plane {
    pub fn name(self) -> &'static str {
        match self {
            Plane::Grpc => "grpc",
            Plane::Data(k) => k.name(),
        }
    }
}

pub struct Client {
    runtime: Arc<Runtime>,
    grpc: FlightServiceClient<Channel>,
    token: Option<MetadataValue<tonic::metadata::Ascii>>,
    planes: Option<Arc<Planes>>,
    transport: Transport,
    host_id: String,
    /// Whether the server answered our hello, once known.
    offers: std::sync::Mutex<Option<bool>>,
}

impl Client {
    /// Connects to `grpc://host:port` (or `grpc+tcp://`), or to `grpc+tls://host:port`
    /// checking the server against the system's roots. The data-plane key comes from
    /// `WIRESPEED_KEY` if set; see [`Client::with_key`].
    pub fn connect(url: &str) -> Result<Self> {
        Self::connect_tls(url, &ClientTls::default())
    }

    /// As [`Client::connect`], with what a `grpc+tls://` connection trusts and presents
    /// (unused for `grpc://`).
    pub fn connect_tls(url: &str, tls: &ClientTls) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name("flight-client")
            .build()
            .map_err(|e| Error::internal(format!("cannot start a runtime: {e}")))?;
        let channel = runtime.block_on(grpc::channel::connect(url, tls))?;
        let grpc = FlightServiceClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        let key = Key::from_env_or_file(None).ok().flatten();
        Ok(Client {
            runtime: Arc::new(runtime),
            grpc,
            token: None,
            planes: key.map(|k| Arc::new(Planes::new(k))),
            transport: Transport::Auto,
            host_id: crate::server::host_id(),
            offers: Default::default(),
        })
    }

    /// The key for data planes; without one every call uses gRPC.
    pub fn with_key(mut self, key: Key) -> Self {
        self.planes = Some(Arc::new(Planes::new(key)));
        self
    }

    pub fn with_transport(mut self, transport: Transport) -> Self {
        self.transport = transport;
        self
    }

    /// Flight's Basic-then-Bearer handshake; later calls carry the token.
    pub fn authenticate(&mut self, user: &str, password: &str) -> Result<()> {
        let mut request = tonic::Request::new(futures::stream::iter([arrow_flight::HandshakeRequest::default()]));
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

    /// The bearer token from [`Client::authenticate`], as the `authorization` header's value.
    pub fn token(&self) -> Option<String> {
        self.token.as_ref().and_then(|t| t.to_str().ok()).map(str::to_string)
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(token) = &self.token {
            request.metadata_mut().insert("authorization", token.clone());
        }
        request
    }

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

    pub fn get_flight_info(&self, descriptor: &FlightDescriptor) -> Result<FlightInfo> {
        let mut grpc = self.grpc.clone();
        let request = self.request(descriptor.clone());
        Ok(self.runtime.block_on(grpc.get_flight_info(request))?.into_inner())
    }

    pub fn get_schema(&self, descriptor: &FlightDescriptor) -> Result<SchemaRef> {
        let mut grpc = self.grpc.clone();
        let request = self.request(descriptor.clone());
        let result = self.runtime.block_on(grpc.get_schema(request))?.into_inner();
        Ok(Arc::new(arrow_schema::Schema::try_from(&result)?))
    }

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

    pub fn list_actions(&self) -> Result<Vec<ActionType>> {
        let mut grpc = self.grpc.clone();
        let request = self.request(Empty {});
        self.runtime.block_on(async move {
            let stream = grpc.list_actions(request).await?.into_inner();
            Ok(stream.collect::<Vec<_>>().await.into_iter().collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// Whether this server answered our hello (see [`crate::plane::hello`]), asked once with
    /// ListActions, which any Flight server answers; a failed ask is not remembered.
    fn offers_planes(&self) -> Result<bool> {
        let Some(planes) = &self.planes else { return Ok(false) };
        if self.transport == Transport::Grpc {
            return Ok(false);
        }
        if let Some(known) = *self.offers.lock().unwrap_or_else(|p| p.into_inner()) {
            return Ok(known);
        }
        let request = self.hello(planes, Empty {})?;
        let mut grpc = self.grpc.clone();
        let offered = match self.runtime.block_on(grpc.list_actions(request)) {
            Ok(response) => response.metadata().contains_key(PLANES_HEADER),
            Err(_) => return Ok(false),
        };
        *self.offers.lock().unwrap_or_else(|p| p.into_inner()) = Some(offered);
        Ok(offered)
    }

    /// A request that carries our hello.
    fn hello<T>(&self, planes: &Planes, message: T) -> Result<tonic::Request<T>> {
        let mut request = self.request(message);
        let value = hello::hello(planes.key())?.parse().map_err(|_| Error::internal("hello is not a header value"))?;
        request.metadata_mut().insert(HELLO_HEADER, value);
        Ok(request)
    }

    /// One of our actions, with the hello that lets the server answer it.
    fn plane_action(&self, action: Action) -> Result<Vec<Bytes>> {
        let planes = self.planes.as_ref().ok_or_else(|| Error::internal("no key for a data-plane action"))?;
        self.action(self.hello(planes, action)?)
    }

    /// Reads one endpoint of a flight: over a data plane its locations name, else one this
    /// server offers for its ticket, else gRPC.
    pub fn do_get(&self, endpoint: &FlightEndpoint) -> Result<FlightReader> {
        let ticket = endpoint.ticket.clone().ok_or_else(|| Error::invalid_argument("the endpoint has no ticket"))?;
        let uris: Vec<&str> = endpoint.location.iter().map(|l| l.uri.as_str()).collect();
        if !uris.iter().any(|u| PlaneLocation::parse(u).is_some()) && self.planes.is_some() {
            return self.do_get_ticket(&ticket.ticket);
        }
        if let Some((location, planes)) = self.pick(&uris)? {
            match planes.open(&location, Method::Get, &ticket.ticket) {
                Ok(stream) => {
                    stream.finish()?;
                    return FlightReader::from_plane(stream, location.kind);
                }
                Err(e) if self.transport != Transport::Auto => return Err(e),
                Err(_) => {} // unreachable plane: gRPC below
            }
        }
        self.grpc_get(ticket)
    }

    /// Reads a ticket from this server, as pyarrow's `do_get(ticket)` does: a wirespeed server
    /// is asked for data-plane locations first (one more round trip); others serve it on gRPC.
    pub fn do_get_ticket(&self, ticket: &[u8]) -> Result<FlightReader> {
        let ticket = Ticket { ticket: Bytes::copy_from_slice(ticket) };
        let uris = self.plane_uris(GET_ACTION, ticket.ticket.clone())?;
        if uris.is_empty() {
            return self.grpc_get(ticket);
        }
        let location = uris.into_iter().map(|uri| arrow_flight::Location { uri }).collect();
        self.do_get(&FlightEndpoint { ticket: Some(ticket), location, ..Default::default() })
    }

    /// Reads a whole flight, endpoint after endpoint.
    pub fn get(&self, descriptor: &FlightDescriptor) -> Result<(SchemaRef, Vec<RecordBatch>)> {
        let info = self.get_flight_info(descriptor)?;
        let mut schema = Arc::new(info.clone().try_decode_schema()?);
        let mut batches = Vec::new();
        for endpoint in &info.endpoint {
            let reader = self.do_get(endpoint)?;
            schema = reader.schema();
            for batch in reader {
                batches.push(batch?);
            }
        }
        Ok((schema, batches))
    }

    fn grpc_get(&self, ticket: Ticket) -> Result<FlightReader> {
        if let Transport::Only(kind) = self.transport {
            return Err(Error::unavailable(format!("the server offers no {} data plane here", kind.name())));
        }
        let mut grpc = self.grpc.clone();
        let request = self.request(ticket);
        let stream = self.runtime.block_on(grpc.do_get(request))?.into_inner();
        FlightReader::from_grpc(stream, &self.runtime)
    }

    /// The data plane to use among `uris`, if any.
    fn pick(&self, uris: &[&str]) -> Result<Option<(PlaneLocation, Arc<Planes>)>> {
        let Some(planes) = &self.planes else {
            return match self.transport {
                Transport::Only(_) => Err(Error::unauthenticated("a data plane needs a key (WIRESPEED_KEY)")),
                _ => Ok(None),
            };
        };
        if self.transport == Transport::Grpc {
            return Ok(None);
        }
        let mut offered: Vec<PlaneLocation> = uris
            .iter()
            .filter_map(|u| PlaneLocation::parse(u))
            .filter(|l| l.grant.is_some())
            .filter(|l| !l.kind.capabilities().same_host_only || l.host.as_deref() == Some(self.host_id.as_str()))
            .collect();
        offered.sort_by_key(|l| l.kind);
        let chosen = match self.transport {
            Transport::Only(kind) => offered.into_iter().find(|l| l.kind == kind),
            _ => offered.into_iter().next(),
        };
        Ok(chosen.map(|l| (l, planes.clone())))
    }

    /// Data-plane locations for an upload or exchange, from a wirespeed server; none from others.
    fn plane_for(&self, method: Method, descriptor: &FlightDescriptor) -> Result<Option<(PlaneLocation, Arc<Planes>)>> {
        if self.planes.is_none() || self.transport == Transport::Grpc {
            return self.pick(&[]);
        }
        let action = if method == Method::Put { PUT_ACTION } else { EXCHANGE_ACTION };
        let uris = self.plane_uris(action, descriptor.encode_to_vec().into())?;
        self.pick(&uris.iter().map(String::as_str).collect::<Vec<_>>())
    }

    /// The data-plane locations a wirespeed server offers for one call; none from others.
    fn plane_uris(&self, action: &str, body: Bytes) -> Result<Vec<String>> {
        if !self.offers_planes()? {
            return Ok(Vec::new());
        }
        match self.plane_action(Action { r#type: action.into(), body }) {
            Ok(uris) => Ok(uris.iter().map(|u| String::from_utf8_lossy(u).into_owned()).collect()),
            Err(e) if e.code() == tonic::Code::Unimplemented || e.code() == tonic::Code::InvalidArgument => {
                Ok(Vec::new())
            }
            Err(e) => Err(e),
        }
    }

    /// Starts an upload of batches with `schema` to `descriptor`.
    pub fn do_put(&self, descriptor: &FlightDescriptor, schema: &SchemaRef) -> Result<FlightWriter> {
        if let Some((location, planes)) = self.plane_for(Method::Put, descriptor)? {
            let stream = planes.open(&location, Method::Put, &descriptor.encode_to_vec())?;
            return self.plane_writer(stream, schema, location.kind, true);
        }
        let (tx, results) = std::sync::mpsc::channel();
        let (writer, call) = self.grpc_stream(descriptor, schema, |mut grpc, request| async move {
            let mut answers = grpc.do_put(request).await?.into_inner();
            while let Some(r) = answers.message().await? {
                let _ = tx.send(r.app_metadata);
            }
            Ok(())
        })?;
        let inner = WriterInner::GrpcPut { writer, call: Some(call), results };
        Ok(FlightWriter { inner, runtime: self.runtime.clone() })
    }

    /// Starts an exchange: write to the first half, read from the second.
    pub fn do_exchange(
        &self,
        descriptor: &FlightDescriptor,
        schema: &SchemaRef,
    ) -> Result<(FlightWriter, FlightReader)> {
        if let Some((location, planes)) = self.plane_for(Method::Exchange, descriptor)? {
            let stream = planes.open(&location, Method::Exchange, &descriptor.encode_to_vec())?;
            let writer = self.plane_writer(stream.clone(), schema, location.kind, false)?;
            let reader = FlightReader::from_plane(stream, location.kind)?;
            return Ok((writer, reader));
        }
        let runtime = self.runtime.clone();
        let (writer, call) = self.grpc_stream(descriptor, schema, |mut grpc, request| async move {
            Ok(grpc.do_exchange(request).await?.into_inner())
        })?;
        let stream = runtime.block_on(call).map_err(|e| Error::internal(e.to_string()))??;
        let reader = FlightReader::from_grpc(stream, &runtime)?;
        Ok((FlightWriter { inner: WriterInner::GrpcExchange { writer }, runtime }, reader))
    }

    fn plane_writer(&self, stream: Arc<Stream>, schema: &SchemaRef, kind: Fabric, put: bool) -> Result<FlightWriter> {
        let writer = plane::Writer::start(&stream, schema)?;
        let results = put.then(|| plane::Reader::new(stream.clone()));
        Ok(FlightWriter { inner: WriterInner::Plane { stream, writer, kind, results }, runtime: self.runtime.clone() })
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
        let (encoder, first) = grpc::Writer::start(schema)?;
        let mut first = grpc::flight_data(first);
        first.flight_descriptor = Some(descriptor.clone());
        let (tx, rx) = mpsc::channel(2);
        tx.try_send(first).map_err(|_| Error::internal("request queue full at start"))?;
        let handle = self.runtime.spawn(call(self.grpc.clone(), self.request(ReceiverStream::new(rx))));
        Ok((GrpcWriter { encoder, tx: Some(tx) }, handle))
    }
}

/// The batches of one call.
pub struct FlightReader {
    source: Box<dyn DecodedStream>,
    schema: SchemaRef,
    plane: Plane,
    /// Keeps a data-plane stream for closing it properly once read.
    stream: Option<Arc<Stream>>,
    done: bool,
    /// A gRPC call's connection runs on its client's runtime: kept running while the call is
    /// read, even once the client is dropped.
    _runtime: Option<Arc<Runtime>>,
}

impl FlightReader {
    fn from_plane(stream: Arc<Stream>, kind: Fabric) -> Result<Self> {
        let source = plane::Reader::new(stream.clone());
        Self::start(Box::new(source), Plane::Data(kind), Some(stream), None)
    }

    fn from_grpc(stream: tonic::Streaming<FlightData>, runtime: &Arc<Runtime>) -> Result<Self> {
        let source = grpc::Reader::new(stream, runtime.handle().clone(), None);
        Self::start(Box::new(source), Plane::Grpc, None, Some(runtime.clone()))
    }

    fn start(
        mut source: Box<dyn DecodedStream>,
        plane: Plane,
        stream: Option<Arc<Stream>>,
        runtime: Option<Arc<Runtime>>,
    ) -> Result<Self> {
        let schema = source.read_schema()?;
        Ok(FlightReader { source, schema, plane, stream, done: false, _runtime: runtime })
    }

    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// Which plane carries this call.
    pub fn plane(&self) -> Plane {
        self.plane
    }

    /// Waits up to `within` for the next message (or the end, or an error) without taking it;
    /// false if none came. Lets a caller stay responsive between waits: wait in slices, then
    /// read. Slices that add up to the data plane's timeout fail as one read would.
    pub fn wait_ready(&mut self, within: std::time::Duration) -> Result<bool> {
        Ok(self.done || self.source.wait_ready(within)?)
    }

    /// The next batch or metadata-only message; None at the end.
    pub fn next_payload(&mut self) -> Result<Option<Payload>> {
        if self.done {
            return Ok(None);
        }
        let next = self.source.next_payload();
        if !matches!(next, Ok(Some(_))) {
            self.done = true;
            if let Some(stream) = self.stream.take() {
                close(&stream, std::time::Duration::from_secs(1));
            }
        }
        next
    }
}

impl Iterator for FlightReader {
    type Item = Result<RecordBatch>;
    /// The batches, skipping messages that carry only metadata.
    fn next(&mut self) -> Option<Result<RecordBatch>> {
        loop {
            match self.next_payload() {
                Ok(Some(Payload { batch: Some(b), .. })) => return Some(Ok(b)),
                Ok(Some(_)) => continue,
                Ok(None) => return None,
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

struct GrpcWriter {
    encoder: grpc::Writer,
    tx: Option<mpsc::Sender<FlightData>>,
}

enum WriterInner {
    /// A DoPut reads the server's PutResults through `results`; an exchange's answers are
    /// read through its reader instead.
    Plane {
        stream: Arc<Stream>,
        writer: plane::Writer,
        kind: Fabric,
        results: Option<plane::Reader>,
    },
    GrpcPut {
        writer: GrpcWriter,
        call: Option<JoinHandle<Result<()>>>,
        /// The PutResults as the call receives them.
        results: std::sync::mpsc::Receiver<Bytes>,
    },
    GrpcExchange {
        writer: GrpcWriter,
    },
}

/// The sending half of an upload or exchange.
pub struct FlightWriter {
    inner: WriterInner,
    runtime: Arc<Runtime>,
}

impl FlightWriter {
    pub fn plane(&self) -> Plane {
        match &self.inner {
            WriterInner::Plane { kind, .. } => Plane::Data(*kind),
            _ => Plane::Grpc,
        }
    }

    pub fn write(&mut self, batch: RecordBatch) -> Result<()> {
        self.write_payload(Payload::batch(batch))
    }

    pub fn write_payload(&mut self, payload: Payload) -> Result<()> {
        match &mut self.inner {
            WriterInner::Plane { stream, writer, .. } => match writer.write(stream, payload) {
                // The server gave up (and said why on the stream): report its reason.
                Err(Error::Transport(_)) => Err(self.failure()),
                other => other,
            },
            WriterInner::GrpcPut { writer, .. } | WriterInner::GrpcExchange { writer } => {
                for frame in writer.encoder.encode(payload)? {
                    let tx = writer.tx.as_ref().ok_or_else(|| Error::internal("writer already finished"))?;
                    if tx.blocking_send(grpc::flight_data(frame)).is_err() {
                        return Err(self.failure());
                    }
                }
                Ok(())
            }
        }
    }

    /// Why the call failed, once sending did.
    fn failure(&mut self) -> Error {
        match &mut self.inner {
            WriterInner::Plane { stream, .. } => {
                let mut reader = plane::Reader::new(stream.clone());
                loop {
                    match reader.next_payload() {
                        Ok(Some(_)) => continue,
                        Ok(None) => return Error::unavailable("the server ended the call"),
                        Err(e) => return e,
                    }
                }
            }
            WriterInner::GrpcPut { call, .. } => match call.take() {
                Some(call) => match self.runtime.block_on(call) {
                    Ok(Err(e)) => e,
                    _ => Error::unavailable("the server ended the call"),
                },
                None => Error::internal("writer already finished"),
            },
            WriterInner::GrpcExchange { .. } => Error::unavailable("the server ended the exchange"),
        }
    }

    /// A DoPut's next PutResult, as the server sends it while we write (a server may answer
    /// each message, and a client wait for it); None once the call has ended. Results read
    /// here are not returned again by [`FlightWriter::finish`].
    pub fn next_result(&mut self) -> Result<Option<Bytes>> {
        match &mut self.inner {
            WriterInner::Plane { results: Some(reader), .. } => Ok(reader.next_payload()?.map(|p| p.app_metadata)),
            WriterInner::GrpcPut { results, .. } => match results.recv_timeout(RESULT_WAIT) {
                Ok(result) => Ok(Some(result)),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Ok(None),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    Err(Error::status(Code::DeadlineExceeded, "no PutResult within 300 s"))
                }
            },
            _ => Err(Error::internal("only a DoPut has PutResults")),
        }
    }

    /// Ends the upload; for DoPut, returns the server's PutResults not read yet.
    pub fn finish(mut self) -> Result<Vec<Bytes>> {
        match &mut self.inner {
            WriterInner::Plane { stream, results, .. } => {
                stream.finish()?;
                let mut all = Vec::new();
                if let Some(reader) = results {
                    while let Some(p) = reader.next_payload()? {
                        all.push(p.app_metadata);
                    }
                }
                Ok(all)
            }
            WriterInner::GrpcPut { writer, call, results } => {
                writer.tx = None;
                let call = call.take().ok_or_else(|| Error::internal("writer already finished"))?;
                self.runtime.block_on(call).map_err(|e| Error::internal(e.to_string()))??;
                Ok(results.try_iter().collect())
            }
            WriterInner::GrpcExchange { writer } => {
                writer.tx = None;
                Ok(Vec::new())
            }
        }
    }
}

