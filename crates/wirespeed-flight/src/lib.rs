#![deny(missing_docs, unreachable_pub)]
//! Arrow Flight whose control plane is standard gRPC (any Flight client and server works with
//! it) and whose data can bypass gRPC over wirespeed connections: shared memory on one host,
//! ucx or tcp between hosts.
//!
//! - [`Handler`] is what a service implements, once, for every plane; [`Server`] serves it.
//! - [`Client`] talks to any Flight server and takes a data plane when one is offered.
//!
//! Layers, bottom up: `ipc` (RecordBatches to frames and back, sans-IO), `plane` (calls on
//! wirespeed streams), `grpc` (tonic's Flight service and FlightData), then [`server`] and
//! [`client`]; [`handler`] is what a service implements, [`discovery`] how a client holding the
//! key learns of a server's planes. The first three are private: what they offer is at the
//! root.

#![forbid(unsafe_code)]

pub mod client;
pub mod discovery;
pub mod error;
mod grpc;
pub mod handler;
mod ipc;
mod location;
mod plane;
mod runtime;
pub mod server;
mod stored;
pub mod telemetry;

/// Not for applications: what the fuzz targets decode. It may change in any release.
#[doc(hidden)]
pub mod internal {
    pub use crate::ipc::Decoder;
    pub use crate::plane::proto::Msg;
}

pub use arrow_flight::{FlightDescriptor, FlightEndpoint, FlightInfo, Ticket};
pub use client::flight_actions::SessionOptionError;
pub use client::{
    Client, ExchangeReader, FlightReader, FlightWriter, Method, Plane, PlaneChoice, PlaneClient, PutResults,
};
pub use error::{Code, Error, IpcViolation, Result, Violation};
pub use grpc::advertise::Advertise;
pub use grpc::connections::Limits;
pub use grpc::session::{OptionValue, SessionOptionValue, StringList};
pub use grpc::tls::{ClientTls, ServerTls};
pub use handler::{Gauge, Handler, Input, Intake, Output, Payload, Payloads, PlaneCall, Upload};
pub use ipc::{ReadStats, SharedStats, WriteOptions, share, share_all};
pub use plane::calls::Calls;
pub use plane::listeners::PlaneServer;
pub use server::{DEFAULT_HANDLER_THREADS, Server, ServerBuilder};
pub use stored::{StoredBatch, StoredFile};
pub use telemetry::{CallObserver, CallSummary};
pub use wirespeed::Fabric;
