//! The gRPC services served beside Flight's (health, reflection), each boxed to one type.

use std::convert::Infallible;

use tonic::body::Body;
use tonic::codegen::http;
use tower::util::BoxCloneSyncService;

pub(crate) type SideService = BoxCloneSyncService<http::Request<Body>, http::Response<Body>, Infallible>;

pub(crate) fn boxed<S>(service: S) -> SideService
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    BoxCloneSyncService::new(service)
}
