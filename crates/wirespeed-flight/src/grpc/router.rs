//! The Flight service as tonic serves it, except for the calls that carry batches: DoGet and
//! DoExchange answer through [`FrameCodec`], which writes each batch's buffers straight into
//! gRPC's buffer, and these two and DoPut take messages up to [`MAX_MESSAGE`], where the other
//! calls take [`MAX_CONTROL_MESSAGE`].

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use arrow_flight::flight_service_server::FlightServiceServer;
use arrow_flight::{FlightData, PutResult, Ticket};
use tonic::codegen::{Body, BoxFuture, Service as TowerService, StdError, http};
use tonic::server::{Grpc, NamedService, ServerStreamingService, StreamingService};
use tonic::{Request, Response, Status, Streaming};

use super::{MAX_CONTROL_MESSAGE, MAX_MESSAGE, MAX_METADATA};
use tonic_prost::ProstCodec;

use super::advertise::RequestAuthority;
use super::codec::FrameCodec;
use super::drive::Responses;
use super::health;
use super::reflection;
use super::service::{FrameStream, Service};
use super::side::SideService;
use crate::discovery::PLANES_HEADER;
use crate::ipc::Frame;
use crate::telemetry::metrics::Refusal;
use bytes::Bytes;

#[derive(Clone)]
pub(crate) struct Router {
    service: Arc<Service>,
    rest: FlightServiceServer<Service>,
    health: SideService,
    reflection: [SideService; 2],
}

impl Router {
    pub(crate) fn new(service: Service, health: SideService) -> Self {
        let service = Arc::new(service);
        let rest = FlightServiceServer::from_arc(service.clone())
            .max_decoding_message_size(MAX_CONTROL_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        Router { service, rest, health, reflection: reflection::services() }
    }
}

impl NamedService for Router {
    const NAME: &'static str = super::FLIGHT_SERVICE;
}

impl<B> TowerService<http::Request<B>> for Router
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        let service = self.service.clone();
        let refuse = |status: Status| -> Self::Future { Box::pin(async move { Ok(status.into_http()) }) };
        let path = req.uri().path();
        // Probes carry no credentials, and still hear while the server drains.
        if path.starts_with(health::PATH) {
            return side(&mut self.health, req);
        }
        let metrics = &service.shared.telemetry.metrics;
        if service.shared.draining.load(Ordering::Relaxed) {
            metrics.refused_call(Refusal::Draining);
            return refuse(Status::unavailable("the server is shutting down: try again elsewhere or later"));
        }
        if let Err(status) = metadata_fits(req.headers()) {
            metrics.refused_call(Refusal::Metadata);
            return refuse(status);
        }
        if let Some(authority) = req.uri().authority().cloned() {
            req.extensions_mut().insert(RequestAuthority(authority));
        }
        if let Err(refused) = service.admit(&mut req) {
            return refused;
        }
        if let Some(i) = reflection::PATHS.iter().position(|p| req.uri().path().starts_with(p)) {
            return side(&mut self.reflection[i], req);
        }
        let Some(offer) = service.offer(req.headers()) else { return self.route(req) };
        let response = self.route(req);
        Box::pin(async move {
            let mut response = response.await?;
            response.headers_mut().insert(PLANES_HEADER, offer);
            Ok(response)
        })
    }
}

impl Router {
    fn route<B>(&mut self, req: http::Request<B>) -> BoxFuture<http::Response<tonic::body::Body>, Infallible>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<StdError> + Send + 'static,
    {
        let service = self.service.clone();
        match req.uri().path() {
            "/arrow.flight.protocol.FlightService/DoGet" => {
                Box::pin(async move { Ok(grpc::<Ticket>().server_streaming(DoGet(service), req).await) })
            }
            "/arrow.flight.protocol.FlightService/DoExchange" => {
                Box::pin(async move { Ok(grpc::<FlightData>().streaming(DoExchange(service), req).await) })
            }
            "/arrow.flight.protocol.FlightService/DoPut" => Box::pin(async move {
                let codec = ProstCodec::<PutResult, FlightData>::default();
                let mut grpc = Grpc::new(codec).apply_max_message_size_config(Some(MAX_MESSAGE), Some(MAX_MESSAGE));
                Ok(grpc.streaming(DoPut(service), req).await)
            }),
            _ => self.rest.call(req),
        }
    }
}

/// A call to one of the services beside Flight's.
fn side<B>(service: &mut SideService, req: http::Request<B>) -> BoxFuture<http::Response<tonic::body::Body>, Infallible>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    Box::pin(service.call(req.map(tonic::body::Body::new)))
}

/// Refuses a request whose headers pass [`MAX_METADATA`], as gRPC's own servers do.
fn metadata_fits(headers: &http::HeaderMap) -> Result<(), Status> {
    // HTTP/2 counts each header as its name, its value and 32 bytes.
    let size: usize = headers.iter().map(|(name, value)| name.as_str().len() + value.len() + 32).sum();
    if size > MAX_METADATA {
        return Err(Status::resource_exhausted(format!(
            "request metadata of {size} bytes exceeds this server's limit of {MAX_METADATA}"
        )));
    }
    Ok(())
}

fn grpc<D: prost::Message + Default + Send + 'static>() -> Grpc<FrameCodec<D>> {
    Grpc::new(FrameCodec::default()).apply_max_message_size_config(Some(MAX_MESSAGE), Some(MAX_MESSAGE))
}

struct DoGet(Arc<Service>);

impl ServerStreamingService<Ticket> for DoGet {
    type Response = Frame;
    type ResponseStream = FrameStream;
    type Future = BoxFuture<Response<FrameStream>, Status>;

    fn call(&mut self, request: Request<Ticket>) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move { service.get_frames(request).await })
    }
}

struct DoPut(Arc<Service>);

impl StreamingService<FlightData> for DoPut {
    type Response = PutResult;
    type ResponseStream = Responses<PutResult>;
    type Future = BoxFuture<Response<Responses<PutResult>>, Status>;

    fn call(&mut self, request: Request<Streaming<FlightData>>) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move { service.put(request).await })
    }
}

struct DoExchange(Arc<Service>);

impl StreamingService<FlightData> for DoExchange {
    type Response = Frame;
    type ResponseStream = FrameStream;
    type Future = BoxFuture<Response<FrameStream>, Status>;

    fn call(&mut self, request: Request<Streaming<FlightData>>) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move { service.exchange_frames(request).await })
    }
}
