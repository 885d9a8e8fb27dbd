//! The data-plane half of a client, apart from gRPC so that a client whose control plane is
//! someone else's (pyarrow's, in `wirespeed.flight`) can use it: given the locations a server
//! handed out for one call, it picks the fastest plane this process can reach and runs the
//! call there.

use std::sync::Arc;

use arrow_flight::FlightDescriptor;
use arrow_schema::SchemaRef;
use prost::Message as _;
use wirespeed::Key;
use wirespeed::fabric::Choice;

use super::PlaneChoice;
use super::stream::{FlightReader, FlightWriter};
use crate::error::{Error, Result};
use crate::ipc::WriteOptions;
use crate::location::PlaneLocation;
use crate::plane::connections::PlaneConnections;
use crate::plane::proto::Method;

/// The data-plane half of a client (see the module's docs): the key, the connections it keeps to each plane, and which planes it may take.
pub struct PlaneClient {
    planes: Arc<PlaneConnections>,
    transport: PlaneChoice,
    /// The host this client reached the server at: a location on an unspecified address (a
    /// server listening on every one) means that host.
    reached: Option<String>,
}

impl PlaneClient {
    /// A plane client holding `key`, taking the fastest plane offered.
    pub fn new(key: Key) -> Self {
        PlaneClient { planes: Arc::new(PlaneConnections::new(key)), transport: PlaneChoice::Auto, reached: None }
    }

    /// Auto (the fastest offered, else the caller's gRPC) or one plane (else an error).
    pub fn with_transport(mut self, transport: PlaneChoice) -> Self {
        self.transport = transport;
        self
    }

    /// The host this client reached the server at, for locations on an unspecified address.
    pub fn reached(mut self, host: &str) -> Self {
        self.reached = Some(host.to_string());
        self
    }

    /// The key it holds.
    pub fn key(&self) -> &Key {
        self.planes.key()
    }

    /// The plane to use among `uris`; None if none fits (then the call goes over gRPC), an
    /// error if the one plane asked for is not among them.
    fn pick(&self, uris: &[String]) -> Result<Option<PlaneLocation>> {
        let choice = match self.transport {
            PlaneChoice::Grpc => return Ok(None),
            PlaneChoice::Auto => Choice::Auto,
            PlaneChoice::Only(kind) => Choice::Only(kind),
        };
        let offered: Vec<PlaneLocation> =
            uris.iter().filter_map(|u| PlaneLocation::parse(u)).filter(|l| l.grant.is_some()).collect();
        match choice.pick(offered.iter().map(|l| (l.kind, l.host.as_deref()))) {
            Some(kind) => Ok(offered.into_iter().find(|l| l.kind == kind).map(|l| self.on_reached_host(l))),
            None => match choice {
                Choice::Only(kind) => {
                    let others: Vec<&str> =
                        offered.iter().map(|l| l.kind.name()).filter(|&n| n != kind.name()).collect();
                    let others = if kind.capabilities().same_host_only {
                        let rest = if others.is_empty() { "none".to_string() } else { others.join(", ") };
                        format!("{} is for clients on the server's own host; it offers {rest}", kind.name())
                    } else if others.is_empty() {
                        "none at all to this client: it has no data planes, or not this key".to_string()
                    } else {
                        format!("it offers {}", others.join(", "))
                    };
                    Err(Error::unavailable(format!("the server offers no {} data plane here ({others})", kind.name())))
                }
                Choice::Auto => Ok(None),
            },
        }
    }

    fn on_reached_host(&self, mut location: PlaneLocation) -> PlaneLocation {
        let Some(host) = &self.reached else { return location };
        for unspecified in ["0.0.0.0:", "[::]:"] {
            if let Some(at) = location.url.find(unspecified) {
                let host =
                    if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host.clone() };
                location.url.replace_range(at..at + unspecified.len() - 1, &host);
            }
        }
        location
    }

    /// Opens a call on the chosen plane; with Auto, a plane that does not answer means gRPC.
    fn open(
        &self,
        uris: &[String],
        method: Method,
        target: &[u8],
    ) -> Result<Option<(PlaneLocation, Arc<crate::plane::CallStream>)>> {
        let Some(location) = self.pick(uris)? else { return Ok(None) };
        match self.planes.open(&location, method, target) {
            Ok(stream) => Ok(Some((location, stream))),
            Err(e) if self.transport != PlaneChoice::Auto => Err(e),
            Err(_) => Ok(None),
        }
    }

    /// Reads `ticket` over a plane among `uris`.
    pub fn get(&self, uris: &[String], ticket: &[u8]) -> Result<Option<FlightReader>> {
        let Some((location, stream)) = self.open(uris, Method::Get, ticket)? else { return Ok(None) };
        stream.finish()?;
        FlightReader::from_plane(stream, location.kind, false).map(Some)
    }

    /// Starts an upload over a plane among `uris`, its batches laid out as `options` say.
    pub fn put(
        &self,
        uris: &[String],
        descriptor: &FlightDescriptor,
        schema: &SchemaRef,
        options: WriteOptions,
    ) -> Result<Option<FlightWriter>> {
        let Some((location, stream)) = self.open(uris, Method::Put, &descriptor.encode_to_vec())? else {
            return Ok(None);
        };
        FlightWriter::on_plane(stream, Some((schema, options)), location.kind, true).map(Some)
    }

    /// Starts an exchange over a plane among `uris`, as gRPC does: the server's handler runs
    /// at once; the writer sends its schema at [`FlightWriter::begin`], and the answers are
    /// read once asked for (a handler may read all its input before it writes, or write
    /// without reading).
    pub fn exchange(
        &self,
        uris: &[String],
        descriptor: &FlightDescriptor,
    ) -> Result<Option<(FlightWriter, ExchangeReader)>> {
        let Some((location, stream)) = self.open(uris, Method::Exchange, &descriptor.encode_to_vec())? else {
            return Ok(None);
        };
        let writer = FlightWriter::on_plane(stream.clone(), None, location.kind, false)?;
        Ok(Some((writer, ExchangeReader { stream, kind: location.kind })))
    }
}

/// The reading half of an exchange on a data plane, not yet opened.
pub struct ExchangeReader {
    stream: Arc<crate::plane::CallStream>,
    kind: wirespeed::Fabric,
}

impl ExchangeReader {
    /// The reader of the server's answers, which waits for them (and for the schema, which
    /// may come after application metadata) only when read.
    pub fn open(self) -> Result<FlightReader> {
        FlightReader::from_plane(self.stream, self.kind, true)
    }
}
