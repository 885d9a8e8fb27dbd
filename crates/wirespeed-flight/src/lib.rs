//! Arrow Flight whose control plane is standard gRPC (any Flight client and server works with
//! it) and whose data can bypass gRPC over wirespeed connections: shared memory on one host,
//! ucx or tcp between hosts.
//!
//! - [`Handler`] is what a service implements, once, for every plane; [`Server`] serves it.
//! - [`Client`] talks to any Flight server and takes a data plane when one is offered.
//!
//! Layers, bottom up: `ipc` (RecordBatches to frames and back, sans-IO), `plane` (calls on
//! wirespeed streams), `grpc` (the Flight service and FlightData), then `server` and `client`.

#![forbid(unsafe_code)]

pub mod client;
pub mod error;
pub mod grpc;
pub mod ipc;
pub mod location;
pub mod plane;
mod runtime;
pub mod server;
pub mod service;
pub mod stored;

pub use arrow_flight::{FlightDescriptor, FlightEndpoint, FlightInfo, Ticket};
pub use client::{
    Client, ExchangeReader, FlightReader, FlightWriter, Method, Plane, PlaneClient, PutResults, Transport,
};
pub use error::{Code, Error, Result, Violation};
pub use grpc::advertise::Advertise;
pub use grpc::connections::Limits;
pub use grpc::tls::{ClientTls, ServerTls};
pub use ipc::{ReadStats, SharedStats, WriteOptions, share, share_all};
pub use plane::listeners::PlaneServer;
pub use plane::server::Calls;
pub use server::{DEFAULT_HANDLER_THREADS, Server, ServerBuilder};
pub use service::{Handler, Input, Intake, Output, Payload, Payloads, PlaneCall, Upload};
pub use stored::{StoredBatch, StoredFile};
pub use wirespeed::Fabric;
