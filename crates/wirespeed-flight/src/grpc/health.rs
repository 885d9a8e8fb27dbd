//! gRPC's health checking (`grpc.health.v1.Health`, Check and Watch), as load balancers and
//! Kubernetes probe it: the server and its Flight service are SERVING, and NOT_SERVING once it
//! drains. It answers without authentication, as probes carry none.

use tonic_health::ServingStatus;
use tonic_health::server::{HealthReporter, HealthService};

use super::FLIGHT_SERVICE;
use super::side::{SideService, boxed};

pub(crate) const PATH: &str = "/grpc.health.v1.Health/";

/// The health service, and what sets its status.
pub(crate) fn service() -> (HealthReporter, SideService) {
    let reporter = HealthReporter::new();
    let service =
        tonic_health::pb::health_server::HealthServer::new(HealthService::from_health_reporter(reporter.clone()));
    (reporter, boxed(service))
}

/// Sets the whole server's status and its Flight service's.
pub(crate) async fn set(reporter: &HealthReporter, serving: bool) {
    let status = if serving { ServingStatus::Serving } else { ServingStatus::NotServing };
    for name in ["", FLIGHT_SERVICE] {
        reporter.set_service_status(name, status).await;
    }
}
