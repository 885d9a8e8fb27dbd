//! The Flight gRPC service in front of a [`Handler`]: every method runs the handler on a
//! blocking thread; FlightInfo endpoints get this server's locations, each data-plane one with
//! a capability for its ticket.

use std::net::SocketAddr;
use std::sync::Arc;

use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo, HandshakeRequest, HandshakeResponse,
    Location, PollInfo, PutResult, SchemaAsIpc, SchemaResult, Ticket,
};
use arrow_ipc::writer::IpcWriteOptions;
use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use prost::Message as _;
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::auth::Auth;
use super::{Reader, flight_data, pump};
use crate::error::{Error, Result};
use crate::ipc::{DecodedStream, Frame};
use crate::location::{PlaneKind, PlaneLocation};
use crate::plane::proto::Method;
use crate::plane::server::Shared;
use crate::service::{Handler, Input};

/// Actions that hand out data-plane locations for an upload or an exchange.
pub const PUT_ACTION: &str = "wirespeed.put";
pub const EXCHANGE_ACTION: &str = "wirespeed.exchange";

/// A data-plane listener as advertised.
#[derive(Clone, Debug)]
pub struct Advert {
    pub kind: PlaneKind,
    /// For tcp and ucx, the port (the host is the one the client reached us at); for shm, the URL.
    pub port: u16,
    pub url: String,
}

pub struct Service {
    pub shared: Arc<Shared>,
    pub adverts: Vec<Advert>,
    pub auth: Option<Auth>,
    /// Used when the request does not say which address it came in on.
    pub default_host: std::net::IpAddr,
    pub grpc_port: u16,
    pub host_id: String,
}

type Stream<T> = BoxStream<'static, Result<T, Status>>;
/// What DoGet and DoExchange answer with (see [`super::router`]).
pub type FrameStream = Stream<Frame>;

impl Service {
    fn authorize<T>(&self, request: &Request<T>) -> Result<(), Status> {
        match &self.auth {
            Some(auth) => auth.check(request.metadata()).map_err(Status::from),
            None => Ok(()),
        }
    }

    fn handler(&self) -> Arc<dyn Handler> {
        self.shared.handler.clone()
    }

    /// gRPC first (clients that take the first location get a plain Flight one), then ours.
    fn locations(&self, local: Option<SocketAddr>, method: Method, target: &[u8]) -> Vec<Location> {
        let ip = local.map(|a| a.ip()).unwrap_or(self.default_host);
        let port = local.map(|a| a.port()).unwrap_or(self.grpc_port);
        let mut out = vec![Location { uri: format!("grpc://{}", SocketAddr::new(ip, port)) }];
        for a in &self.adverts {
            let (url, host) = match a.kind {
                PlaneKind::Shm => (a.url.clone(), Some(self.host_id.clone())),
                kind => (format!("{}://{}", kind.scheme(), SocketAddr::new(ip, a.port)), None),
            };
            let grant = Some(self.shared.minter.grant(method, target));
            out.push(Location { uri: PlaneLocation { kind: a.kind, url, host, grant }.to_uri() });
        }
        out
    }

    fn complete(&self, mut info: FlightInfo, local: Option<SocketAddr>) -> FlightInfo {
        for ep in &mut info.endpoint {
            if ep.location.is_empty() {
                let ticket = ep.ticket.as_ref().map(|t| t.ticket.clone()).unwrap_or_default();
                ep.location = self.locations(local, Method::Get, &ticket);
            }
        }
        info
    }

    /// DoGet, answered with frames.
    pub async fn get_frames(&self, request: Request<Ticket>) -> Result<Response<FrameStream>, Status> {
        self.authorize(&request)?;
        let handler = self.handler();
        let ticket = request.into_inner().ticket;
        let output = blocking(move || handler.do_get(&ticket)).await?;
        let (tx, rx) = channel();
        tokio::task::spawn_blocking(move || pump_to(&tx, output));
        Ok(Response::new(rx))
    }

    /// DoExchange, answered with frames.
    pub async fn exchange_frames(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<FrameStream>, Status> {
        self.authorize(&request)?;
        let handler = self.handler();
        let (descriptor, reader) = open_input(request.into_inner()).await?;
        let (tx, rx) = channel();
        tokio::task::spawn_blocking(move || match input(reader).and_then(|i| handler.do_exchange(&descriptor, i)) {
            Ok(output) => pump_to(&tx, output),
            Err(e) => {
                let _ = tx.blocking_send(Err(e.into()));
            }
        });
        Ok(Response::new(rx))
    }
}

/// The generated service's form of a frame stream (the router serves frames directly).
fn as_flight_data(frames: FrameStream) -> Stream<FlightData> {
    frames.map(|f| f.map(flight_data)).boxed()
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T, Status> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Status::internal(format!("handler panicked: {e}")))?
        .map_err(Status::from)
}

/// A response stream fed from a blocking thread through a small queue.
fn channel<T: Send + 'static>() -> (mpsc::Sender<Result<T, Status>>, Stream<T>) {
    let (tx, rx) = mpsc::channel(2);
    (tx, ReceiverStream::new(rx).boxed())
}

fn pump_to(tx: &mpsc::Sender<Result<Frame, Status>>, output: crate::service::Output) {
    pump(&output.schema, output.payloads, |d| tx.blocking_send(d.map_err(Status::from)).is_ok());
}

/// Takes the first message (it names the flight) and hands the rest to a blocking reader.
async fn open_input(mut stream: Streaming<FlightData>) -> Result<(FlightDescriptor, Reader), Status> {
    let first = stream.message().await?.ok_or_else(|| Status::invalid_argument("empty stream"))?;
    let descriptor = first
        .flight_descriptor
        .clone()
        .ok_or_else(|| Status::invalid_argument("the first message must carry a FlightDescriptor"))?;
    // A client may name the flight in a message of its own (pyarrow does for DoExchange).
    let naming_only = first.data_header.is_empty() && first.app_metadata.is_empty();
    let pending = (!naming_only).then_some(first);
    Ok((descriptor, Reader::new(stream, Handle::current(), pending)))
}

fn input(mut reader: Reader) -> Result<Input> {
    let schema = reader.read_schema()?;
    Ok(Input::new(schema, reader.into_payloads()))
}

#[tonic::async_trait]
impl FlightService for Service {
    type HandshakeStream = Stream<HandshakeResponse>;
    type ListFlightsStream = Stream<FlightInfo>;
    type DoGetStream = Stream<FlightData>;
    type DoPutStream = Stream<PutResult>;
    type DoExchangeStream = Stream<FlightData>;
    type DoActionStream = Stream<arrow_flight::Result>;
    type ListActionsStream = Stream<ActionType>;

    async fn handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        let Some(auth) = &self.auth else {
            return Ok(Response::new(stream::iter([Ok(HandshakeResponse::default())]).boxed()));
        };
        let token = auth.handshake(request.metadata())?;
        let reply = HandshakeResponse { protocol_version: 0, payload: Bytes::from(token.clone()) };
        let mut response = Response::new(stream::iter([Ok(reply)]).boxed());
        let value = format!("Bearer {token}").parse().map_err(|_| Status::internal("token is not a header value"))?;
        response.metadata_mut().insert("authorization", value);
        Ok(response)
    }

    async fn list_flights(&self, request: Request<Criteria>) -> Result<Response<Self::ListFlightsStream>, Status> {
        self.authorize(&request)?;
        let local = request.local_addr();
        let handler = self.handler();
        let criteria = request.into_inner().expression;
        let infos = blocking(move || handler.list_flights(&criteria)).await?;
        let infos: Vec<_> = infos.into_iter().map(|i| Ok(self.complete(i, local))).collect();
        Ok(Response::new(stream::iter(infos).boxed()))
    }

    async fn get_flight_info(&self, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        self.authorize(&request)?;
        let local = request.local_addr();
        let handler = self.handler();
        let descriptor = request.into_inner();
        let info = blocking(move || handler.get_flight_info(&descriptor)).await?;
        Ok(Response::new(self.complete(info, local)))
    }

    async fn poll_flight_info(&self, request: Request<FlightDescriptor>) -> Result<Response<PollInfo>, Status> {
        let info = self.get_flight_info(request).await?.into_inner();
        Ok(Response::new(PollInfo {
            info: Some(info),
            flight_descriptor: None,
            progress: Some(1.0),
            expiration_time: None,
        }))
    }

    async fn get_schema(&self, request: Request<FlightDescriptor>) -> Result<Response<SchemaResult>, Status> {
        self.authorize(&request)?;
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
        self.authorize(&request)?;
        let handler = self.handler();
        let (descriptor, reader) = open_input(request.into_inner()).await?;
        let results = blocking(move || handler.do_put(&descriptor, input(reader)?)).await?;
        let results: Vec<_> = results.into_iter().map(|app_metadata| Ok(PutResult { app_metadata })).collect();
        Ok(Response::new(stream::iter(results).boxed()))
    }

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        Ok(self.exchange_frames(request).await?.map(as_flight_data))
    }

    async fn do_action(&self, request: Request<Action>) -> Result<Response<Self::DoActionStream>, Status> {
        self.authorize(&request)?;
        let local = request.local_addr();
        let action = request.into_inner();
        let method = match action.r#type.as_str() {
            PUT_ACTION => Some(Method::Put),
            EXCHANGE_ACTION => Some(Method::Exchange),
            _ => None,
        };
        let bodies = match method {
            Some(method) => {
                FlightDescriptor::decode(action.body.clone())
                    .map_err(|e| Status::invalid_argument(format!("bad FlightDescriptor: {e}")))?;
                // Only the data-plane locations: the caller already has the gRPC one.
                self.locations(local, method, &action.body).into_iter().skip(1).map(|l| Bytes::from(l.uri)).collect()
            }
            None => {
                let handler = self.handler();
                blocking(move || handler.do_action(&action)).await?
            }
        };
        let results: Vec<_> = bodies.into_iter().map(|body| Ok(arrow_flight::Result { body })).collect();
        Ok(Response::new(stream::iter(results).boxed()))
    }

    async fn list_actions(&self, request: Request<Empty>) -> Result<Response<Self::ListActionsStream>, Status> {
        self.authorize(&request)?;
        let mut actions = self.handler().list_actions();
        if !self.adverts.is_empty() {
            for (name, what) in [(PUT_ACTION, "an upload"), (EXCHANGE_ACTION, "an exchange")] {
                actions.push(ActionType {
                    r#type: name.into(),
                    description: format!("data-plane locations for {what}; body: a FlightDescriptor"),
                });
            }
        }
        Ok(Response::new(stream::iter(actions.into_iter().map(Ok)).boxed()))
    }
}
