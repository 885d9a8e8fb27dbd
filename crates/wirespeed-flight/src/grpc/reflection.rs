//! gRPC server reflection (v1, and v1alpha for older tools), so that `grpcurl` and other
//! generic clients list, describe and call the Flight service. The Flight descriptor is
//! `proto/flight.bin` (see `proto/flight.proto`).

use super::side::{SideService, boxed};

pub(crate) const PATHS: [&str; 2] =
    ["/grpc.reflection.v1.ServerReflection/", "/grpc.reflection.v1alpha.ServerReflection/"];

/// Arrow Flight's service and messages, as compiled from `proto/flight.proto`.
const FLIGHT_DESCRIPTOR: &[u8] = include_bytes!("../../proto/flight.bin");

/// The v1 and v1alpha reflection services.
pub(crate) fn services() -> [SideService; 2] {
    let builder = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(FLIGHT_DESCRIPTOR)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    // The descriptors are ours and checked by the tests: they always build.
    let v1 = builder().build_v1().expect("the Flight descriptor is valid");
    let v1alpha = builder().build_v1alpha().expect("the Flight descriptor is valid");
    [boxed(v1), boxed(v1alpha)]
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    /// The descriptor describes every method the router serves.
    #[test]
    fn the_flight_descriptor_names_every_method() {
        let set = prost_types::FileDescriptorSet::decode(super::FLIGHT_DESCRIPTOR).unwrap();
        let flight = set.file.iter().find(|f| f.package() == "arrow.flight.protocol").unwrap();
        let service = &flight.service[0];
        assert_eq!(service.name(), "FlightService");
        let methods: Vec<_> = service.method.iter().map(|m| m.name()).collect();
        for m in crate::telemetry::METHODS.iter().filter(|m| !["Health", "Reflection", "unknown"].contains(m)) {
            assert!(methods.contains(m), "{m} missing from {methods:?}");
        }
        super::services();
    }
}
