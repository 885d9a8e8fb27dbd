//! The Flight gRPC service in front of a [`Handler`]: every method runs the handler on a
//! blocking thread; FlightInfo endpoints get this server's locations, each data-plane one with
//! a capability for its ticket. Calls reach it through [`super::router::Router`], which admits
//! them first ([`Service::admit`]).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use arrow_buffer::Buffer;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, ActionType, CancelFlightInfoRequest, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, RenewFlightEndpointRequest, SchemaAsIpc, SchemaResult,
    Ticket,
};
use arrow_ipc::writer::IpcWriteOptions;
use bytes::Bytes;
use futures::stream::{self, StreamExt};
use prost::Message as _;
use tokio::runtime::Handle;
use tonic::codegen::{BoxFuture, http};
use tonic::transport::server::TcpConnectInfo;
use tonic::{Request, Response, Status, Streaming};

use super::advertise::{Advertise, Listening, RequestAuthority, locate};
use super::auth::Auth;
use super::drive::{self, Responses};
use super::held::Held;
use super::session::{self, Sessions};
use super::{Reader, flight_data};
use crate::discovery::{self, HELLO_HEADER};
use crate::error::{Error, Result};
use crate::handler::{Handler, Input};
use crate::ipc::{Decoded, DecodedStream, Decoder, Frame};
use crate::plane::calls::Shared;
use crate::plane::listeners::PlaneServer;
use crate::plane::proto::Method;
use crate::telemetry::CallRecord;
use crate::telemetry::metrics::Refusal;

const HANDSHAKE_PATH: &str = "/arrow.flight.protocol.FlightService/Handshake";

/// A bearer token minted for an admitted handshake.
#[derive(Clone)]
struct Token(String);

pub(crate) struct Service {
    pub shared: Arc<Shared>,
    /// The data planes, with a key.
    pub planes: Option<PlaneServer>,
    pub auth: Option<Auth>,
    /// Used when the request does not say which address it came in on.
    pub default_host: std::net::IpAddr,
    /// Exchanges that may run at once (each holds a handler thread).
    pub exchanges: Arc<tokio::sync::Semaphore>,
    /// What endpoints without a location are given, and where we listen to name it.
    pub advertise: Advertise,
    pub listening: Listening,
    /// Flight's session options, by session.
    pub sessions: Sessions,
    /// Responses held for their readers, over every call.
    pub held: Arc<Held>,
}

/// What DoGet and DoExchange answer with (see [`super::router`]).
pub(crate) type FrameStream = Responses<Frame>;

impl Service {
    /// Lets a call in on its headers alone, before its body is read: with a password, the
    /// handshake needs Basic credentials (its token then rides in the request's extensions)
    /// and any other call a bearer token. A refusal is the answer to send, held back as the
    /// login throttle says.
    pub(crate) fn admit<B>(
        &self,
        request: &mut http::Request<B>,
    ) -> Result<(), BoxFuture<http::Response<tonic::body::Body>, Infallible>> {
        let Some(auth) = &self.auth else { return Ok(()) };
        let record = request.extensions().get::<Arc<CallRecord>>().cloned();
        let metrics = &self.shared.telemetry.metrics;
        if request.uri().path() != HANDSHAKE_PATH {
            let user = auth.check(request.headers()).map_err(|e| {
                metrics.auth_failed("token");
                refuse(Status::from(e), Duration::ZERO)
            })?;
            record.inspect(|r| r.identify(&user));
            return Ok(());
        }
        let peer = request.extensions().get::<TcpConnectInfo>().and_then(|i| i.remote_addr).map(|a| a.ip());
        match auth.login(request.headers(), peer) {
            Ok((token, user)) => {
                record.inspect(|r| r.identify(&user));
                request.extensions_mut().insert(Token(token));
                Ok(())
            }
            Err(refused) => {
                metrics.auth_failed("password");
                Err(refuse(Status::from(refused.error), refused.hold))
            }
        }
    }

    /// This server's location for endpoints that name none, as the request reached it.
    fn own_location<T>(&self, request: &Request<T>) -> Option<String> {
        let authority = request.extensions().get::<RequestAuthority>().map(|a| &a.0);
        self.listening.location(&self.advertise, authority, request.local_addr())
    }

    fn handler(&self) -> Arc<dyn Handler> {
        self.shared.handler.clone()
    }

    /// The planes to name to a client whose hello proves it holds our key (see
    /// [`crate::discovery`]).
    pub(crate) fn offer(&self, headers: &http::HeaderMap) -> Option<http::HeaderValue> {
        let hello = headers.get(HELLO_HEADER)?.to_str().ok()?;
        http::HeaderValue::from_str(&self.planes.as_ref()?.answer(hello)?).ok()
    }

    /// DoGet, answered with frames.
    pub(crate) async fn get_frames(&self, request: Request<Ticket>) -> Result<Response<FrameStream>, Status> {
        let handler = self.handler();
        let record = request.extensions().get::<Arc<CallRecord>>().cloned();
        let ticket = request.into_inner().ticket;
        let output = blocking(move || handler.do_get(&ticket)).await?;
        let (tx, rx) = drive::frames(&self.held);
        tokio::spawn(drive::feed(tx, output, record));
        Ok(Response::new(rx))
    }

    /// DoPut: the upload goes to the handler a message at a time; PutResults come back as it
    /// returns them, while the upload runs.
    pub(crate) async fn put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Responses<PutResult>>, Status> {
        let handler = self.handler();
        let record = request.extensions().get::<Arc<CallRecord>>().cloned();
        let mut stream = request.into_inner();
        let (descriptor, mut pending) = first_message(&mut stream).await?;
        let mut decoder = Decoder::default();
        let data = match pending.take() {
            Some(d) => d,
            None => {
                stream.message().await?.ok_or_else(|| Status::invalid_argument("the upload ended before its schema"))?
            }
        };
        let Decoded::Schema(schema) =
            decoder.decode(&data.data_header, Buffer::from(data.data_body), data.app_metadata)?
        else {
            return Err(Status::invalid_argument("an upload must start with its schema"));
        };
        let mut upload = blocking(move || handler.do_put(&descriptor, &schema)).await?;
        upload.reading(decoder.stats());
        let (tx, rx) = drive::channel();
        tokio::spawn(drive::upload(stream, decoder, upload, tx, record));
        Ok(Response::new(rx))
    }

    /// DoExchange, answered with frames. The handler reads its input as it likes: while it
    /// waits for the client's next message, it holds a blocking thread. So exchanges take at
    /// most half the handler threads, and more are refused.
    pub(crate) async fn exchange_frames(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<FrameStream>, Status> {
        let slot = self.exchanges.clone().try_acquire_owned().map_err(|_| {
            self.shared.telemetry.metrics.refused_call(Refusal::Exchanges);
            Status::resource_exhausted("too many exchanges open on this server: try again when some have ended")
        })?;
        let handler = self.handler();
        let record = request.extensions().get::<Arc<CallRecord>>().cloned();
        let mut stream = request.into_inner();
        let (descriptor, pending) = first_message(&mut stream).await?;
        let reader = Reader::new(stream, Handle::current(), pending);
        let mut output = blocking(move || handler.do_exchange(&descriptor, Input::new(reader.payloads()))).await?;
        let payloads = output.payloads;
        output.payloads = Box::new(payloads.inspect(move |_| {
            let _held = &slot;
        }));
        let (tx, rx) = drive::frames(&self.held);
        tokio::spawn(drive::feed(tx, output, record));
        Ok(Response::new(rx))
    }
}

impl Service {
    /// The actions Flight itself defines, answered through the handler's methods for them
    /// (sessions by the server itself); None for any other action.
    async fn flight_action(
        &self,
        request: &Request<Action>,
    ) -> Option<Result<Response<Responses<arrow_flight::Result>>, Status>> {
        let action = request.get_ref();
        let handler = self.handler();
        let body = action.body.clone();
        let answer = match action.r#type.as_str() {
            CANCEL_FLIGHT_INFO => {
                blocking(move || {
                    let request = decode::<CancelFlightInfoRequest>(&body)?;
                    Ok(handler.cancel_flight_info(&request)?.encode_to_vec())
                })
                .await
            }
            RENEW_FLIGHT_ENDPOINT => {
                let location = self.own_location(request);
                blocking(move || {
                    let request = decode::<RenewFlightEndpointRequest>(&body)?;
                    let mut endpoint = handler.renew_flight_endpoint(&request)?;
                    if let (true, Some(uri)) = (endpoint.location.is_empty(), location) {
                        endpoint.location.push(arrow_flight::Location { uri });
                    }
                    Ok(endpoint.encode_to_vec())
                })
                .await
            }
            kind @ (session::SET | session::GET | session::CLOSE) => {
                let answer = match self.sessions.act(kind, &body, request.metadata().as_ref()) {
                    Ok(answer) => answer,
                    Err(e) => return Some(Err(e.into())),
                };
                let result = arrow_flight::Result { body: answer.body };
                let mut response = Response::new(stream::iter([Ok(result)]).boxed());
                if let Some(cookie) = answer.set_cookie.and_then(|c| c.parse().ok()) {
                    response.metadata_mut().insert("set-cookie", cookie);
                }
                return Some(Ok(response));
            }
            _ => return None,
        };
        Some(answer.map(|body| Response::new(stream::iter([Ok(arrow_flight::Result { body: body.into() })]).boxed())))
    }
}

/// `body` as the request message `M`.
fn decode<M: prost::Message + Default>(body: &[u8]) -> Result<M> {
    M::decode(body).map_err(|e| {
        Error::invalid_argument(format!(
            "bad {}: {e}",
            std::any::type_name::<M>().rsplit("::").next().unwrap_or("request")
        ))
    })
}

/// The action types of Flight's CancelFlightInfo and RenewFlightEndpoint.
pub(crate) const CANCEL_FLIGHT_INFO: &str = "CancelFlightInfo";
pub(crate) const RENEW_FLIGHT_ENDPOINT: &str = "RenewFlightEndpoint";

/// The answer `status`, sent after `hold`.
fn refuse(status: Status, hold: Duration) -> BoxFuture<http::Response<tonic::body::Body>, Infallible> {
    Box::pin(async move {
        tokio::time::sleep(hold).await;
        Ok(status.into_http())
    })
}

/// The generated service's form of a frame stream (the router serves frames directly).
fn as_flight_data(frames: FrameStream) -> Responses<FlightData> {
    frames.map(|f| f.map(flight_data)).boxed()
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T, Status> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Status::internal(format!("handler panicked: {e}")))?
        .map_err(Status::from)
}

/// Takes the first message, which names the flight; returns the descriptor, and the message
/// if it carries more (a client may name the flight in a message of its own, as pyarrow does
/// for DoExchange).
async fn first_message(stream: &mut Streaming<FlightData>) -> Result<(FlightDescriptor, Option<FlightData>), Status> {
    let first = stream.message().await?.ok_or_else(|| Status::invalid_argument("empty stream"))?;
    let descriptor = first
        .flight_descriptor
        .clone()
        .ok_or_else(|| Status::invalid_argument("the first message must carry a FlightDescriptor"))?;
    let naming_only = first.data_header.is_empty() && first.app_metadata.is_empty();
    Ok((descriptor, (!naming_only).then_some(first)))
}

#[tonic::async_trait]
impl FlightService for Service {
    type HandshakeStream = Responses<HandshakeResponse>;
    type ListFlightsStream = Responses<FlightInfo>;
    type DoGetStream = Responses<FlightData>;
    type DoPutStream = Responses<PutResult>;
    type DoExchangeStream = Responses<FlightData>;
    type DoActionStream = Responses<arrow_flight::Result>;
    type ListActionsStream = Responses<ActionType>;

    async fn handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        if self.auth.is_none() {
            return Ok(Response::new(stream::iter([Ok(HandshakeResponse::default())]).boxed()));
        }
        let Some(Token(token)) = request.extensions().get::<Token>().cloned() else {
            return Err(Status::unauthenticated("send Basic credentials"));
        };
        let reply = HandshakeResponse { protocol_version: 0, payload: Bytes::from(token.clone()) };
        let mut response = Response::new(stream::iter([Ok(reply)]).boxed());
        let value = format!("Bearer {token}").parse().map_err(|_| Status::internal("token is not a header value"))?;
        response.metadata_mut().insert("authorization", value);
        Ok(response)
    }

    async fn list_flights(&self, request: Request<Criteria>) -> Result<Response<Self::ListFlightsStream>, Status> {
        let handler = self.handler();
        let location = self.own_location(&request);
        let criteria = request.into_inner().expression;
        let mut infos = blocking(move || handler.list_flights(&criteria)).await?;
        infos.iter_mut().for_each(|info| locate(info, location.as_deref()));
        let infos: Vec<_> = infos.into_iter().map(Ok).collect();
        Ok(Response::new(stream::iter(infos).boxed()))
    }

    async fn get_flight_info(&self, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        let handler = self.handler();
        let location = self.own_location(&request);
        let descriptor = request.into_inner();
        let mut info = blocking(move || handler.get_flight_info(&descriptor)).await?;
        locate(&mut info, location.as_deref());
        Ok(Response::new(info))
    }

    async fn poll_flight_info(&self, request: Request<FlightDescriptor>) -> Result<Response<PollInfo>, Status> {
        let handler = self.handler();
        let location = self.own_location(&request);
        let descriptor = request.into_inner();
        let mut poll = blocking(move || handler.poll_flight_info(&descriptor)).await?;
        if let Some(info) = &mut poll.info {
            locate(info, location.as_deref());
        }
        Ok(Response::new(poll))
    }

    async fn get_schema(&self, request: Request<FlightDescriptor>) -> Result<Response<SchemaResult>, Status> {
        let handler = self.handler();
        let descriptor = request.into_inner();
        let schema = blocking(move || handler.get_schema(&descriptor)).await?;
        let result = SchemaAsIpc::new(&schema, &IpcWriteOptions::default()).try_into().map_err(Error::from)?;
        Ok(Response::new(result))
    }

    async fn do_get(&self, request: Request<Ticket>) -> Result<Response<Self::DoGetStream>, Status> {
        Ok(self.get_frames(request).await?.map(as_flight_data))
    }

    async fn do_put(&self, request: Request<Streaming<FlightData>>) -> Result<Response<Self::DoPutStream>, Status> {
        self.put(request).await
    }

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        Ok(self.exchange_frames(request).await?.map(as_flight_data))
    }

    async fn do_action(&self, request: Request<Action>) -> Result<Response<Self::DoActionStream>, Status> {
        if let Some(answer) = self.flight_action(&request).await {
            return answer;
        }
        let (local, remote) = (request.local_addr(), request.remote_addr());
        // Ours only for a client that proves it holds the key; to others, the handler's.
        let hello = self.offer(request.metadata().as_ref()).is_some();
        let action = request.into_inner();
        let method = discovery::action_method(&action.r#type).filter(|_| hello);
        let bodies = match method {
            Some(method) => {
                // A ticket is any bytes; uploads and exchanges name a descriptor.
                if method != Method::Get {
                    FlightDescriptor::decode(action.body.clone())
                        .map_err(|e| Status::invalid_argument(format!("bad FlightDescriptor: {e}")))?;
                }
                let host = local.map(|a| a.ip()).unwrap_or(self.default_host);
                let client = remote.map(|a| a.ip());
                let planes = self.planes.as_ref().map(|p| p.locations(host, client, method, &action.body));
                planes.unwrap_or_default().into_iter().map(Bytes::from).collect()
            }
            None => {
                let handler = self.handler();
                blocking(move || handler.do_action(&action)).await?
            }
        };
        let results: Vec<_> = bodies.into_iter().map(|body| Ok(arrow_flight::Result { body })).collect();
        Ok(Response::new(stream::iter(results).boxed()))
    }

    async fn list_actions(&self, _request: Request<Empty>) -> Result<Response<Self::ListActionsStream>, Status> {
        // The data-plane actions are for clients that said hello, not for listing.
        let actions = self.handler().list_actions();
        Ok(Response::new(stream::iter(actions.into_iter().map(Ok)).boxed()))
    }
}
